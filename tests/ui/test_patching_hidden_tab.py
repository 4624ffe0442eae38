"""A hidden Patching tab leaves the window's text alone: a keystroke's text is tokenised by its run
only, and the tab checks the text (the clean token at P) when it is raised."""

import gc
import weakref

from attnviz.ui.panels.patching_panel import CHECK_MS
from windows import IOI, TOY, WAIT, in_sight, open_window


def test_a_hidden_patching_tab_checks_the_text_only_once_it_is_raised(qtbot, tmp_path, monkeypatch):
    w = open_window(qtbot, tmp_path / "p.ini", model=TOY, text=IOI, panels=("patching",))
    w.resize(1400, 1000)
    w.focus_dock.raise_()  # the Patching tab behind the focus view's
    p = w.patching_panel
    qtbot.waitUntil(lambda: not in_sight(p), timeout=WAIT)
    w.worker.wait_idle()
    text = IOI + " now"
    before = w.patching_panel.position_label.text()
    T = len(w.state.model.encode(text)[0])
    tok, encoded = w.state.model.tokenizer, []
    encode = tok.encode
    monkeypatch.setattr(tok, "encode", lambda text, *a, **k: (encoded.append(text), encode(text, *a, **k))[1])
    with qtbot.waitSignal(w.state.sigResultChanged, timeout=WAIT,
                          check_params_cb=lambda r: r is not None and r.text == text):
        w.set_text(text)
    qtbot.wait(3 * CHECK_MS)  # (past the moment a shown tab's check would have been asked for)
    w.worker.wait_idle()
    assert encoded.count(text) == 1, encoded  # the run's own
    w.patching_dock.raise_()
    assert p.position_label.text() == before  # (not checked while hidden)
    qtbot.waitUntil(lambda: p.position_label.text().startswith(f"P = {T - 1} "), timeout=WAIT)
    assert encoded.count(text) == 2  # the check's, once shown


def test_a_hidden_patching_tab_lets_the_model_before_go(qtbot, tmp_path):
    """A model switch while the tab is hidden leaves nothing of the Patching tab holding the model
    before (its expanded layers would stay in memory until the tab was raised)."""
    w = open_window(qtbot, tmp_path / "p.ini", model=TOY, text=IOI, panels=("patching",))
    w.resize(1400, 1000)
    w.patching_dock.show()
    w.patching_dock.raise_()
    p = w.patching_panel
    qtbot.waitUntil(lambda: p.position_label.text().startswith("P = "), timeout=WAIT)  # checked
    w.worker.wait_idle()
    w.focus_dock.raise_()
    qtbot.waitUntil(lambda: not in_sight(p), timeout=WAIT)
    before = weakref.ref(w.state.model)
    with qtbot.waitSignal(w.state.sigLoadReported, timeout=60_000):
        w.load_model("all-MiniLM-L6-v2")
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.model.name == "all-MiniLM-L6-v2",
                    timeout=WAIT)
    w.worker.wait_idle()
    qtbot.waitUntil(lambda: gc.collect() is not None and before() is None, timeout=10_000)
