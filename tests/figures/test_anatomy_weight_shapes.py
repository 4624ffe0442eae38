"""The Anatomy says which way round its weight shapes are: W_K [d_model, kv width] is [in, out]
(x @ W), where the Calculator lists the same matrix [out, in]. Without the note the two tabs
seemed to disagree on W_K's shape."""

from attnviz.engine import load_model
from attnviz.engine.computing.request import RunRequest
from attnviz.figures import anatomy
from tiny import FIXTURES


def test_the_anatomy_says_its_weight_shapes_are_in_out(qapp):
    model = load_model(FIXTURES / "llama_gqa")
    cfg = model.config
    view = anatomy.make_anatomy_view(model, model.run(ids=[3, 1, 4, 1, 5], request=RunRequest(inputs=True)), 0, 0)
    for text_px in (None, 13):  # an export, the panel
        lay = anatomy.layout(view, 1200, text_px=text_px)
        painted = " ".join(t.text for t in lay.texts)
        assert lay.block("w_k").caption.startswith(f"W_K [{cfg.d_model}, {cfg.n_kv_head * cfg.d_head}]")
        assert "weight shapes [in, out], as x @ W multiplies them (the Calculator's [out, in] is the " \
               "same matrix as nn.Linear stores it)" in painted, painted
