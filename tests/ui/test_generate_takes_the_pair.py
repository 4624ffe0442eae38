"""The window's Generate tab runs its steps' layers on two threads (onerow_pair's calls, chosen by
its Fallback: the window asks for it, ui/machinery/tuning.py limit_blas_threads' pair_steps), and
its keystrokes keep their one thread (the core that paints stays free): on SmolLM2's kernels,
where the process has two cores or more on x86-64 (elsewhere no step takes the pair)."""

import importlib.util

import pytest
from PySide6.QtCore import Qt

from attnviz.engine import parallel
from attnviz.ui.machinery import loading as L
from windows import WAIT, open_window, wait_for_text

NUMBA = importlib.util.find_spec("numba") is not None

PROMPT = "The keys to the cabinet"
TYPED = "The keys to the cabinet are on"
STEPS = 6


def _pair():
    from attnviz.engine.computing import onerow_pair

    return onerow_pair


def _prepared(layers) -> bool:
    from attnviz.engine.computing import onerow_stack

    return onerow_stack.prepared(layers)


def _taken() -> dict[str, int]:
    return dict(_pair().TAKEN)


def _grown(before: dict[str, int]) -> dict[str, int]:
    return {k: v - before[k] for k, v in _taken().items()}


@pytest.mark.skipif(not (NUMBA and _pair().AVAILABLE and parallel.cores() >= 2),
                    reason="two threads a step need numba's kernels, x86-64 and two cores")
def test_generate_takes_two_threads_a_step_and_keystrokes_one(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT,
                    panels=("predict", "generate"))
    st, gen, panel = w.state, w.state.generation, w.generate_panel
    assert st.model.weights.packed_types  # (the kernels' one-row runs)
    # the one-row steps and the model's stack warmed after the first analysis (before that a step
    # takes the layer loop: ui/machinery/loading.py warm_the_rest)
    qtbot.waitUntil(lambda: st.effects.analysis is not None, timeout=WAIT)
    qtbot.waitUntil(lambda: _prepared(st.model.weights.layers), timeout=WAIT)
    qtbot.waitUntil(lambda: w.worker.running(L.WARM_KIND) is None, timeout=WAIT)
    w.worker.wait_idle()

    before = _taken()
    panel.n_spin.setValue(STEPS)
    panel.go_on_check.setChecked(True)  # (every step made, end-of-text or not)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == STEPS, timeout=4 * WAIT)
    stepped = _grown(before)
    # every step through the Fallback: its first on one thread (the reference), then the pair for
    # at least PAIR_RUNS calls before any verdict (later ones as the pair pays or not)
    assert stepped["one"] >= 1 and stepped["pair"] >= _pair().PAIR_RUNS, stepped
    assert sum(stepped.values()) >= STEPS - 1, stepped  # (the first step runs the whole prompt)

    w.worker.wait_idle()
    before, rows = _taken(), []
    for n in range(len(PROMPT) + 1, len(TYPED) + 1):
        w.set_text(TYPED[:n])
        wait_for_text(qtbot, w, TYPED[:n])
        rows.append(st.result.cache_computed)
    w.worker.wait_idle()
    assert 1 in rows  # one-row runs on the KV cache among them, as a step's
    assert _grown(before) == {"pair": 0, "one": 0}  # (one thread, no Fallback asked)
    assert parallel.kernel_threads() == 1
