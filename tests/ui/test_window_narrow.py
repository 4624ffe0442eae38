"""The window on a laptop's screen: the What heads do panel's lens title, which names the target
token, wraps instead of widening the dock, so a long predicted token (`<|im_end|>`) never makes the
window wider than the screen it was sized to; on a 1024 x 700 screen the window is 1024 pixels
wide with its side panels docked, and the query read-out in the status bar names the query token
whole with its position (in the row of controls over the grid it had room for "·ca…" only)."""

from windows import WAIT, drain_events, open_window, widget

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


def test_a_long_typed_target_is_cut_not_widening_the_window(qtbot, tmp_path, smollm2):
    """SmolLM2 has a token of 80 '#' (one word: no wrapping shortens it): typed as the target, the
    lens title and the Δ log p line name it cut with an ellipsis, whole in their tooltips."""
    long = "#" * 80
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT,
                    panels=("predict",))
    w.predict_dock.show()
    w.predict_dock.raise_()
    w.resize(1280, 800)
    panel = w.predict_panel
    eff = w.state.effects
    qtbot.waitUntil(lambda: eff.analysis is not None, timeout=WAIT)
    with qtbot.waitSignal(eff.sigAnalysisChanged, timeout=WAIT,
                          check_params_cb=lambda *_: eff.analysis is not None
                          and eff.analysis.label(eff.analysis.target) == long):
        panel.target_edit.setText(long)
        panel.target_edit.editingFinished.emit()
    w.worker.wait_idle()
    drain_events()
    drain_events()
    assert w.width() == 1280, f"asked 1280 pixels wide, the window is {w.width()}"
    title = panel.lens_title
    assert title.isVisible() and title.text().endswith("rank of ‘" + "#" * 24 + "…’")
    assert long in title.toolTip() and long in panel.header.toolTip()
    assert title.heightForWidth(title.width()) <= title.height()
    w.worker.wait_idle()


def test_the_window_fits_a_1024_pixel_screen(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT,
                    panels=("predict", "roles"))
    w.predict_dock.show()
    w.predict_dock.raise_()
    q = w.state.result.labels.index("·cabinet")
    w.state.toggle_query(q)
    w.resize(1024, 700)
    w.worker.wait_idle()
    drain_events()
    drain_events()
    assert w.width() == 1024, f"asked 1024 pixels wide, the window is {w.width()}"
    assert w.predict_dock.isVisible() and not w.predict_dock.isFloating()
    label, tokens = widget(w, "query_label"), widget(w, "tokens_label")
    assert label.isVisible() and label.text() == f"Query: ·cabinet (#{q})"
    assert label.painted_text() == label.text()  # the token whole, with its position
    assert label.fontMetrics().horizontalAdvance(label.text()) <= label.contentsRect().width()
    assert label.parentWidget() is w.statusBar() and label.geometry().right() < tokens.geometry().left()
    assert f"Query: ·cabinet (#{q})" in label.toolTip()
    assert w.centralWidget().geometry().right() < w.predict_dock.geometry().left()
    w.worker.wait_idle()


def test_all_layers_headers_and_kv_captions_are_inside_the_grid(qtbot, tmp_path, smollm2):
    """All layers at 1024 x 700 (heads about 20 pixels a side): the "H0" column headers and the
    "KV g" captions get the height of their text, not a share of a head's side, so none is cut
    by the grid's edge."""
    from PySide6.QtWidgets import QGraphicsSimpleTextItem

    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    w.resize(1024, 700)
    w.state.set_view_mode("all")
    w.worker.wait_idle()
    drain_events()
    drain_events()
    view = w.grid.gw
    box = view.mapFromScene(w.grid.vb.sceneBoundingRect()).boundingRect()
    labels = [t for t in view.scene().items() if isinstance(t, QGraphicsSimpleTextItem)
              and t.isVisible() and (t.text().startswith("KV ") or t.text()[:1] == "H")]
    assert {t.text() for t in labels} >= {"H0", "KV 0", "KV 1", "KV 2"}
    for t in labels:
        r = t.deviceTransform(view.viewportTransform()).mapRect(t.boundingRect()).toAlignedRect()
        assert box.contains(r), f"{t.text()!r} at {r.getRect()} is cut by the grid at {box.getRect()}"
    w.worker.wait_idle()
