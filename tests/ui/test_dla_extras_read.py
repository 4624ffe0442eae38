"""DLA's cells under the map (the embeddings' direct path, the biases) carry their numbers, painted
in the cell (a value near 0 paints a near-white cell whose colour says nothing) and in the hover
with what the cell is; the numbers are the engine's attribution of the run shown."""

import numpy as np
from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.engine.analysing.effects import window_run
from attnviz.engine.analysing.predict import attribute
from attnviz.figures import headmap
from attnviz.figures.effects import DLA_NOTES
from attnviz.figures.numbers import signed
from windows import IOI, TOY, WAIT, hover, open_window


def _painted_texts(hm, lay, monkeypatch) -> list[str]:
    said = []
    image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    p = QPainter(image)
    monkeypatch.setattr(p, "drawText", lambda *a: said.append(a[-1]), raising=False)
    headmap.paint(p, hm, lay, background=QColor("white"))
    p.end()
    return said


def test_the_embed_and_bias_cells_read_the_engines_numbers(qtbot, tmp_path, monkeypatch):
    w = open_window(qtbot, tmp_path / "d.ini", model=TOY, text=IOI, panels=("predict",))
    w.resize(1500, 950)
    w.predict_dock.show()
    w.predict_dock.raise_()
    panel = w.predict_panel
    panel.tabs.setCurrentWidget(panel.dla_view)
    view = panel.dla_view
    qtbot.waitUntil(lambda: view.map is not None and w.state.effects.analysis is not None, timeout=WAIT)
    view.grab()
    a = w.state.effects.analysis
    model = w.state.model
    ref = attribute(model, model.lm_head(), window_run(model, IOI).clean, None, a.dla.target, a.dla.alt)
    painted = _painted_texts(view.map, view.lay, monkeypatch)
    for i, (name, value, note) in enumerate((("embed", ref.embed, DLA_NOTES[0]), ("bias", ref.bias, DLA_NOTES[1]))):
        assert f"{name} {signed(value, 3)}" in painted, painted
        r = view.lay.extra_rects[i]
        hover(view, QPoint(int(r.center().x()), int(r.center().y())))
        assert view.toolTip() == f"{name}: {signed(value)} logit ({note})"
    assert np.isclose(ref.total(), ref.logit_diff, atol=1e-3)
