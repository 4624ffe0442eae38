"""The Anatomy's caption for x, the layer's input, is right for the layer drawn: layer 0 reads the
embeddings (a post-LN model's through its embedding LayerNorm), a later layer the previous layer's
output (post-LN) or the normed residual stream (pre-LN). (Layer 0 of MiniLM read "the previous
layer's output", which it has none of.)"""

import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.request import RunRequest
from attnviz.figures import anatomy
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


@pytest.mark.parametrize("name, first, later", [
    ("bert", "x = layer input (post-LN: the embedding LayerNorm's output, LayerNorm(the token + "
             "position + token-type embeddings))",
     "x = layer input (post-LN: the previous layer's output)"),
    ("gpt2", "x = LayerNorm(residual stream: the token + position embeddings)", "x = LayerNorm(residual stream)"),
    ("llama_gqa", "x = RMSNorm(residual stream: the token embeddings)", "x = RMSNorm(residual stream)"),
    ("gemma3", "x = RMSNorm(residual stream: the token embeddings × √d_model)", "x = RMSNorm(residual stream)"),
])
def test_the_input_caption_names_what_the_layer_reads(qapp, name, first, later):
    model = load_model(FIXTURES / name)
    run = model.run(ids=IDS, request=RunRequest(inputs=True))
    for layer, caption in ((0, first), (1, later)):
        view = anatomy.make_anatomy_view(model, run, layer, 0)
        painted = " ".join(t.text for t in anatomy.layout(view, 1200, text_px=13).texts)
        assert caption in painted, painted
        assert layer == 1 or "previous layer" not in painted
