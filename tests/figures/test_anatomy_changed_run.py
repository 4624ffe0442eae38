"""The Anatomy of a changed run (heads switched off): the layer drawn is the run's own."""

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.analysing.effects import Ablation, window_run
from attnviz.engine.computing.request import RunRequest
from attnviz.figures.anatomy import make_anatomy_view
from tiny import tiny_llama


def test_a_changed_runs_anatomy_has_the_runs_own_head_outputs(tmp_path):
    """Heads switched off: the anatomy of the changed run (its layer inputs and patterns) draws the
    head outputs z the run used, the switched-off head's replaced, so its share of the layer's
    output is 0; a note says which head. The clean run's anatomy has the head's own output."""
    model = load_model(tiny_llama(tmp_path / "m", seed=3, n_head=4, n_kv_head=2, n_layer=2))
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    run = window_run(model, "", ids=ids, request=RunRequest(inputs=True),
                     ablation=Ablation(heads=((1, 2),)))
    r = run.result
    view = make_anatomy_view(model, r, 1)
    np.testing.assert_allclose(view.anatomy.head_out, r.trace.z[1], atol=1e-5)  # the run's own z
    assert not view.anatomy.head_out[2].any() and view.share[2] == 0 and view.share.sum() > 0.99
    assert any("H2 switched off" in n for n in view.notes)
    clean = make_anatomy_view(model, model.run(ids=ids, request=RunRequest(inputs=True, use_cache=False)), 1)
    assert clean.share[2] > 0 and not any("switched off" in n for n in clean.notes)
