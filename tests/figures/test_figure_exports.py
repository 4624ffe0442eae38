"""Every panel figure (Why here?, Circuits, Patching, What heads do, Anatomy) exports through the
one pair render.figure_exports makes of its layout and paint: its PNG is the image that layout and
paint draw, its SVG the same drawing titled and described as before, byte for byte."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C
from attnviz.engine.analysing.effects import analyse, window_run
from attnviz.engine.analysing.patching import patch
from attnviz.engine.analysing.qk import qk_attribution, qk_trace
from attnviz.engine.computing.request import RunRequest
from attnviz.figures import anatomy, circuits, effects, patching, render, why
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
TEXT = ", ".join(map(str, IDS))  # (the fixture has no tokenizer: its text is typed ids)
CORRUPT = [3, 1, 4, 1, 5, 9, 2, 7, 5, 3, 5]


@pytest.fixture(scope="module")
def views(qapp):
    """(module, view, its paint, the SVG's description as the module wrote it) for each figure."""
    model = load_model(FIXTURES / "gpt2")
    trace = qk_trace()
    result = model.run(TEXT, trace=trace, request=RunRequest(inputs=True))
    a = qk_attribution(model, trace, 1, 0, 8, 2)
    run = window_run(model, TEXT)
    effect = effects.effects_view("dla", analyse(model, run, position=8), model=model.name,
                                  result=run.result, kv_group=model.kv_group)
    patched = patch(model, np.array(IDS), np.array(CORRUPT), "head_out")
    out = [(why, why.why_view(a, model=model.name, result=result), why.paint, f"attnviz why here: {TEXT}"),
           (circuits, circuits.circuits_view(C.circuits(model), model=model.name, kv_group=model.kv_group),
            circuits.paint, "attnviz circuits"),
           (patching, patching.patch_view(patched, model.name, list(map(str, IDS)), list(map(str, CORRUPT)),
                                          "5", "3", kv_group=model.kv_group),
            patching._paper_paint, "attnviz patching"),  # (the panel's paint, in paper ink)
           (effects, effect, effects.paint, f"attnviz dla: {TEXT}"),
           (anatomy, anatomy.make_anatomy_view(model, result, 1, 0), anatomy.paint,
            f"attnviz anatomy of layer 1: {TEXT}")]
    return out


@pytest.mark.parametrize("i", range(5))
def test_each_figure_exports_what_its_layout_and_paint_draw(views, i):
    module, view, paint, description = views[i]
    png, lay = module.png_bytes(view, 640)
    want, want_lay = render.png_of(module.layout, paint, view, 640)
    assert png == want and (lay.width, lay.height) == (want_lay.width, want_lay.height)
    svg, lay = module.svg_bytes(view, 640)
    assert svg == render.svg_of(module.layout, paint, view, 640, description)[0]
    assert f"<desc>{description}</desc>".encode() in svg and (lay.width, lay.height) == (want_lay.width, want_lay.height)
