"""DLA's cells under the map (the embeddings' direct path, the biases) carry their numbers, painted
in the cell (a value near 0 paints a near-white cell whose colour says nothing) and in the hover
with what the cell is; the numbers are the engine's attribution of the run shown."""

import numpy as np
from PySide6.QtCore import QPoint

from attnviz.engine.analysing.effects import window_run
from attnviz.engine.analysing.predict import attribute
from attnviz.figures.effects import DLA_NOTES
from attnviz.figures.numbers import signed
from windows import IOI, WAIT, dla_shown, hover, painted_texts, tip_shown


def test_the_embed_and_bias_cells_read_the_engines_numbers(qtbot, tmp_path, monkeypatch):
    w, view = dla_shown(qtbot, tmp_path / "d.ini")
    qtbot.waitUntil(lambda: view.map is not None and w.state.effects.analysis is not None, timeout=WAIT)
    view.grab()
    a = w.state.effects.analysis
    model = w.state.model
    ref = attribute(model, model.lm_head(), window_run(model, IOI).clean, None, a.dla.target, a.dla.alt)
    painted = painted_texts(view.map, view.lay, monkeypatch)
    for i, (name, value, note) in enumerate((("embed", ref.embed, DLA_NOTES[0]), ("bias", ref.bias, DLA_NOTES[1]))):
        assert f"{name} {signed(value, 3)}" in painted, painted
        r = view.lay.extra_rects[i]
        hover(view, QPoint(int(r.center().x()), int(r.center().y())))
        assert tip_shown(view.toolTip()) == f"{name}: {signed(value)} logit ({note})"
    assert np.isclose(ref.total(), ref.logit_diff, atol=1e-3)
