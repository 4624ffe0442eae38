"""A number that is 0 up to float rounding reads without a minus sign: on the toy model (no MLP
weights that write toward the logits) the DLA hover's MLP cells and the Why here? list's `L0 MLP`
rows are -2e-7 or so, and read `+0.0000`, never `-0.0000`; no row's share reads `-0.0%`."""

import numpy as np

from attnviz.engine.analysing import predict as P
from attnviz.engine.analysing import qk as Q
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import Trace
from attnviz.figures import headmap, why

TEXT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"


class _Result:  # what why_view reads of a window's result
    text = TEXT

    def __init__(self, ids):
        self.labels = [str(i) for i in ids]
        self.input_ids = list(ids)


def test_the_dla_hover_reads_a_rounding_zero_without_a_minus(toy):
    r = toy.run(text=TEXT, trace=Trace(z=True, resid=True, mlp_out=True), request=RunRequest(use_cache=False))
    head, q = toy.lm_head(), len(r.trace.ids) - 1
    pred = P.predict(head, r.trace, q, k=2)
    d = P.attribute(toy, head, r.trace, q, int(pred.top_ids[0]), int(pred.top_ids[1]))
    mlp = np.asarray(d.mlp)
    assert (np.abs(mlp) < 5e-5).all() and (mlp < 0).any()  # the case: a tiny negative
    hm = headmap.HeadMap("DLA", np.asarray(d.heads), "logit", None, ("MLP", mlp),
                         (("embed", d.embed), ("bias", d.bias)))
    texts = [headmap.readout(hm, ("column", l)) for l in range(len(mlp))]
    assert texts == [f"L{l} MLP: +0.0000 logit" for l in range(len(mlp))]
    n_layer, n_head = hm.values.shape
    shown = [headmap.readout(hm, ("head", l, h)) for l in range(n_layer) for h in range(n_head)]
    assert not any("-0.0000" in t for t in shown)


def test_the_why_here_list_reads_a_rounding_zero_without_a_minus(toy):
    r = toy.run(text=TEXT, trace=Q.qk_trace(), request=RunRequest(use_cache=False))
    q = len(r.trace.ids) - 1
    a = Q.qk_attribution(toy, r.trace, 1, 0, q, 3)
    view = why.why_view(a, model=toy.name, result=_Result(r.trace.ids))
    secs = why.sections(view, side=len(a.components))  # each side lists every part
    rows = [why.row_text(row) for sec in secs for row in sec.rows]
    mlp = [t for t in rows if t.startswith("L0 MLP  ")]
    assert len(mlp) == 2  # the query side and the key side
    assert all(t.startswith("L0 MLP  +0.0000  +0.0%") for t in mlp), mlp
    assert not any("-0.0000" in t or "-0.0%" in t for t in rows)


def test_the_why_here_picture_paints_a_rounding_zero_without_a_minus(toy, qapp, monkeypatch):
    """The same cell's picture (the panel's paint, what PNG and SVG exports draw): its value and
    share columns as the list writes them."""
    from PySide6.QtGui import QImage, QPainter

    class Recording(QPainter):  # (the texts paint draws)
        texts: list = []

        def drawText(self, *args):
            self.texts.append(args[-1])
            super().drawText(*args)

    r = toy.run(text=TEXT, trace=Q.qk_trace(), request=RunRequest(use_cache=False))
    a = Q.qk_attribution(toy, r.trace, 1, 0, len(r.trace.ids) - 1, 3)
    view = why.why_view(a, model=toy.name, result=_Result(r.trace.ids))
    every = why.sections
    monkeypatch.setattr(why, "sections", lambda v: every(v, side=len(a.components)))  # (every part)
    lay = why.layout(view, 700)
    image = QImage(700, int(lay.height) + 1, QImage.Format.Format_ARGB32)
    p = Recording(image)
    try:
        why.paint(p, view, lay)
    finally:
        p.end()
    texts = [t for t in Recording.texts if isinstance(t, str)]
    values = [t for t in texts if t[:1] in "+-" and "%" in t]
    assert values and any(t.startswith("+0.000  +0.0%") for t in values), values
    assert not any("-0.000" in t or "-0.0%" in t for t in values), values
