"""What heads do's DLA map: its caption writes a logit difference and a sum of parts that are 0 up
to float rounding as +0.000, never -0.000."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.analysing.effects import analyse, window_run
from attnviz.ui.panels.dla_view import dla_map
from tiny import FIXTURES


def test_the_dla_caption_writes_a_rounding_zero_without_a_minus(qapp):
    model = load_model(FIXTURES / "gpt2")
    a = analyse(model, window_run(model, "", ids=[3, 1, 4, 1, 5, 9, 2]), position=5)
    d = replace(a.dla, logit_diff=-2e-7, heads=np.zeros_like(a.dla.heads), mlp=np.zeros_like(a.dla.mlp),
                embed=-3e-7, bias=0.0)
    title = dla_map(SimpleNamespace(result=None, focus=None), replace(a, dla=d)).title
    assert title.endswith("= +0.000; parts add to +0.000"), title
