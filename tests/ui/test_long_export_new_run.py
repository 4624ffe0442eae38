"""A new long run of an edited text with the same token count (the whole pattern shown, so the
region stays): the last overviews stay on screen, but Export picture is off until the new run's
overviews arrive, and then the export is of the new run's weights (docs/long-documents.md)."""

from __future__ import annotations

import numpy as np
from attnviz.engine.computing.longdoc import dense_bytes
from attnviz.figures.data import ExportError
from attnviz.ui.views.long_view import LongView
from windows import WAIT

S = "The cat sat on the mat near the old red door. "


def test_export_waits_for_the_new_run_s_overviews(window, qtbot, tmp_path):
    st = window.state
    cfg = st.model.config
    window.resize(1400, 900)
    window.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    window.set_text(S * 24)
    lg = st.long
    view = window.findChild(LongView)
    qtbot.waitUntil(lambda: lg.run is not None and view.export_button.isEnabled(), timeout=WAIT)
    old_run, T = lg.run, lg.T
    on_arrival = []

    def on_run(run):  # (after the view's own refresh: it connected first)
        try:
            view.export_picture(tmp_path / "stale.png")
            refused = False
        except ExportError:
            refused = True
        on_arrival.append((view.export_button.isEnabled(), view.picture(), refused))
    lg.sigRunChanged.connect(on_run)
    with qtbot.waitSignal(lg.sigRunChanged, timeout=WAIT):
        window.set_text(S.replace("cat", "dog") + S * 23)  # one word edited: the same token count
    lg.sigRunChanged.disconnect(on_run)
    assert lg.run is not old_run and lg.T == T and lg.region == (0, T, 0, T)
    assert on_arrival == [(False, None, True)], "the export offered the previous run's overviews"
    assert not (tmp_path / "stale.png").exists()
    qtbot.waitUntil(view.export_button.isEnabled, timeout=WAIT)
    pic = view.picture()
    tiles = pic.tiles
    fresh = lg.shown().cells(tiles.layer, tiles.region, tiles.values.shape[1:], tiles.reduce)
    np.testing.assert_array_equal(tiles.values, fresh.values)
    view.export_picture(tmp_path / "new.png")
    assert (tmp_path / "new.png").stat().st_size > 0
