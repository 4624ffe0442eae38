"""The window on a laptop's screen: the What heads do panel's lens title, which names the target
token, wraps instead of widening the dock, so a long predicted token (`<|im_end|>`) never makes the
window wider than the screen it was sized to."""

from windows import WAIT, drain_events, open_window

TEXT = "The keys to the cabinet are on the table."


def test_a_long_target_token_does_not_widen_the_window(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT,
                    panels=("predict",))
    w.predict_dock.show()
    w.predict_dock.raise_()
    panel = w.predict_panel
    eff = w.state.effects

    def analysed():
        w.worker.effects_jobs.flush()
        return eff.analysis is not None and eff.run is not None and eff.run.result is w.state.result
    qtbot.waitUntil(analysed, timeout=WAIT)
    a = eff.analysis
    target = a.label(a.target)
    qtbot.waitUntil(lambda: target in panel.lens_title.text(), timeout=WAIT)
    w.resize(1280, 800)
    w.worker.wait_idle()
    drain_events()
    drain_events()
    assert w.width() == 1280, f"asked 1280 pixels wide, the window is {w.width()}"
    title = panel.lens_title
    assert title.isVisible() and target in title.text()
    # the whole title is shown: the height its text needs at its width is the height it has
    assert title.heightForWidth(title.width()) <= title.height()
    w.worker.wait_idle()
