"""A window on SmolLM2 whose first text is one token (a word typed into the empty box: its run is
of one row): the warm-up after the first analysis (ui/machinery/loading.py warm_the_rest) warms the
kernels' one-row steps and builds the model's stack of every layer's blocks (onerow_stack.prepare),
and the keystrokes after it, one-row runs on the KV cache, build no typed List from Python and
compile nothing (a typed List's methods compile once a process: a freeze of a second on the
keystroke that first built one)."""

import importlib.util

import pytest

from attnviz.engine.computing import onerow_stack
from attnviz.ui.machinery import loading as L
from kernel_checks import listen_for_compiles
from windows import WAIT, open_window, wait_for_text

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="the kernels need numba")

FIRST = "The"
TYPED = "The keys to"


def test_keystrokes_after_a_one_token_first_run_compile_nothing(qtbot, tmp_path, smollm2, monkeypatch):
    from numba.typed import List

    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=FIRST, panels=("predict",))
    st = w.state
    model = st.model
    assert model.weights.packed_types and len(st.result.tokens) == 1
    qtbot.waitUntil(lambda: st.effects.analysis is not None, timeout=WAIT)
    # the warm-up follows it on a thread of its own, and builds the stack though the first run
    # warmed the kernels
    qtbot.waitUntil(lambda: onerow_stack.prepared(model.weights.layers), timeout=WAIT)
    qtbot.waitUntil(lambda: w.worker.running(L.WARM_KIND) is None, timeout=WAIT)
    w.worker.wait_idle()

    def built(*_a, **_k):
        raise AssertionError("a typed List built from Python at a keystroke")
    monkeypatch.setattr(List, "empty_list", built)
    monkeypatch.setattr(List, "append", built)
    from numba.core import event

    seen = []
    listener = listen_for_compiles(seen)
    try:
        rows = []
        for n in range(len(FIRST) + 1, len(TYPED) + 1):
            w.set_text(TYPED[:n])
            wait_for_text(qtbot, w, TYPED[:n])
            rows.append(st.result.cache_computed)
        w.worker.wait_idle()
    finally:
        event.unregister("numba:compile", listener)
    assert 1 in rows  # one-row runs on the KV cache among them
    assert seen == []
