"""MLPs stored as zeros are read from the weights and said where a view names MLP parts: an
mlp_out patch of the attention-only toy notes that patching them changes nothing, and QK
attribution that their parts are 0 but for rounding; a model whose MLPs write says nothing."""

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.analysing import patching as PT, qk as Q
from attnviz.engine.analysing.zero_mlps import stored_as_zeros, zero_mlps
from tiny import FIXTURES

ALL_ZERO = "attnviz-toy-stdlib's MLPs are stored as zeros (an attention-only model): each writes exactly 0"


def test_the_toy_s_mlps_are_zeros_and_a_trained_fixture_s_are_not(toy):
    assert zero_mlps(toy) == (0, 1) and stored_as_zeros(toy) == ALL_ZERO
    gpt2 = load_model(FIXTURES / "gpt2")
    assert zero_mlps(gpt2) == () and stored_as_zeros(gpt2) == ""


def test_one_zeroed_mlp_is_named_by_its_layer():
    from copy import copy
    from dataclasses import replace

    gpt2 = copy(load_model(FIXTURES / "gpt2"))  # (a copy: a loaded model may be shared)
    layers = list(gpt2.weights.layers)
    layers[1] = replace(layers[1], w_out=np.zeros_like(layers[1].w_out),
                        b_out=None if layers[1].b_out is None else np.zeros_like(layers[1].b_out))
    gpt2.weights = replace(gpt2.weights, layers=tuple(layers))
    assert zero_mlps(gpt2) == (1,)
    assert stored_as_zeros(gpt2) == "gpt2's L1 MLP is stored as zeros: it writes exactly 0"
    assert stored_as_zeros(gpt2, range(1)) == ""  # (a view of layer 0 only names none)


def test_an_mlp_out_patch_and_a_qk_attribution_of_the_toy_say_so(toy):
    clean, corrupt = toy.encode("the cat sat on the mat")[0], toy.encode("the dog sat on the mat")[0]
    got = PT.patch(toy, clean, corrupt, "mlp_out")
    assert got.note == f"{ALL_ZERO}, so patching its output changes nothing"
    assert PT.patch(toy, clean, corrupt, "resid").note == ""
    trace = toy.run(ids=clean, trace=Q.qk_trace()).trace
    assert Q.qk_attribution(toy, trace, 1, 0, 5, 2).note == (
        f"{ALL_ZERO}, so its MLP parts here are 0 but for float rounding")
    assert Q.qk_attribution(toy, trace, 0, 0, 5, 2).note == ""  # (layer 0 reads no MLP)


def test_the_toy_quantized_to_q8_0_still_has_zero_mlps(toy):
    """Quantized in memory (the window's and `--quantize`'s twin): an all-zero W_out quantizes to
    all-zero blocks, which dequantize to zeros."""
    from attnviz.engine.computing.quantized import quantized_model

    q8 = quantized_model(toy, "Q8_0")
    assert zero_mlps(q8) == (0, 1)
    assert stored_as_zeros(q8) == ALL_ZERO.replace("attnviz-toy-stdlib's", "attnviz-toy-stdlib as Q8_0's")


def test_a_packed_q8_0_w_out_is_read_in_its_blocks(tmp_path):
    """A GGUF model with the kernels on holds W_out in its Q8_0 blocks (no float32 copy): the zero
    MLP of layer 1 is found from those blocks, and no layer is expanded to float32 to find it."""
    import pytest

    pytest.importorskip("numba")
    from attnviz.engine.computing.load import load_gguf
    from attnviz.engine.reading import qpack
    from gguf_files import Q, gguf_tensors, write_gguf

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    cfg["intermediate_size"] = 64  # (whole Q8_0 blocks: ffn_down is packed too)
    rng = np.random.default_rng(0)
    for name in [n for n in tensors if ".ffn_" in n and not n.endswith("norm.weight")]:
        tensors[name] = 0.05 * rng.standard_normal((64, 64)).astype(np.float32)
    tensors["blk.1.ffn_down.weight"][:] = 0
    path = write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0)
    qpack.ask_for_kernels()
    try:
        model = load_gguf(path)
    finally:
        qpack.ask_for_kernels(False)
    store = model.weights.layers
    assert store.packed_view(1).w_out is None and store.packed_view(1).packed.w_out is not None
    assert zero_mlps(model) == (1,)
    assert store.held_bytes() == 0  # (read in its blocks: nothing expanded)


def test_a_model_s_layers_are_read_once_for_every_pick(monkeypatch):
    """Why here? asks at each pick: the second ask of a model reads none of its layers again."""
    model = load_model("attnviz-toy-stdlib")
    first = zero_mlps(model)

    def read(_store, _i):
        raise AssertionError("a layer read again")

    monkeypatch.setattr(type(model.weights.layers), "__getitem__", read)
    assert zero_mlps(model) == first and stored_as_zeros(model)
