"""The per-head W_O Grams a model keeps (Model.output_grams) in its memory accounting: the default
budget leaves room for every layer's, though no load is refused for them (they are made only when
asked for), at load (safetensors and GGUF) and when a loaded model's budget goes back to auto; the
memory line says which are held and their bytes; and a chosen budget, which holds float32 layers,
leaves a second model room that counts none of them, and its refusal does not name them
(tests/engine/test_two_models_memory.py: two models' budgets)."""

import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.pair_memory import load_second
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.errors import AttnvizError, BudgetTooSmall, ModelLoadError
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading import weights
from attnviz.engine.reading.gguf_file import open_gguf
from attnviz.engine.reading.gguf_model import float32_bytes_needed
from attnviz.engine.reading.gguf_tensors import GGUFTensors
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.memory_budget import grams_bytes
from attnviz.engine.reading.weights import Checkpoint
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6]
VALUES = RunRequest(values=True, use_cache=False)


def test_grams_bytes_is_what_the_model_keeps():
    model = load_model(FIXTURES / "llama_gqa")
    c = model.config
    assert grams_bytes(c) == 4 * c.n_layer * c.n_head * c.d_head ** 2 > 0
    assert model.grams_held() == 0
    model.run(ids=IDS, request=VALUES)
    assert model.grams_held() == grams_bytes(c)


def _besides_safetensors(path, store) -> int:  # what the loader counts besides the layers, but the Grams
    return Checkpoint(path).float32_bytes() - sum(store.sizes)


def _besides_gguf(path, store) -> int:
    ts = GGUFTensors(open_gguf(path), path)
    return float32_bytes_needed(load_model(path, budget=None).config, ts) - sum(store.sizes) + store.packed_bytes


def _gguf(tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    return write_gguf(tmp_path / "m.gguf", cfg, tensors, Q.Q8_0)


@pytest.mark.parametrize("kind", ["safetensors", "gguf"])
def test_the_default_budget_leaves_room_for_every_layers_grams(tmp_path, monkeypatch, kind):
    """Memory for every layer and what the model needs besides, but not its Grams: the default
    budget keeps less than every layer, by the Grams' bytes; with room for them too, every layer."""
    path = FIXTURES / "llama_gqa" if kind == "safetensors" else _gguf(tmp_path)
    full = load_model(path, budget=None)
    store = full.weights.layers
    besides = (_besides_safetensors if kind == "safetensors" else _besides_gguf)(path, store)
    total, grams = sum(store.sizes), grams_bytes(full.config)
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + besides + total)
    tight = load_model(path).weights.layers
    assert tight.budget == total - grams and tight.kept < full.config.n_layer
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + besides + total + grams)
    roomy = load_model(path).weights.layers
    assert roomy.budget == total and roomy.kept == full.config.n_layer


@pytest.mark.parametrize("kind", ["safetensors", "gguf"])
def test_a_model_is_not_refused_for_the_grams_it_makes_only_when_asked(tmp_path, monkeypatch, kind):
    """Memory for its largest layer and what it keeps besides its layers, but not for its Grams too:
    the model loads (a budget of one layer, the default leaving room for the Grams); with less than
    the layer and the rest, it is refused, the line naming what it counts."""
    path = FIXTURES / "llama_gqa" if kind == "safetensors" else _gguf(tmp_path)
    full = load_model(path, budget=None)
    store = full.weights.layers
    besides = (_besides_safetensors if kind == "safetensors" else _besides_gguf)(path, store)
    largest, grams = max(store.sizes), grams_bytes(full.config)
    monkeypatch.setattr(weights, "available_memory", lambda: largest + besides + grams // 2)
    model = load_model(path)
    assert model.weights.layers.budget == largest
    assert model.run(ids=IDS, request=VALUES).attentions.shape[0] == full.config.n_layer
    monkeypatch.setattr(weights, "available_memory", lambda: largest + besides - 1)
    with pytest.raises(ModelLoadError, match="its largest layer expanded to float32 and what the "
                                             "model keeps besides its layers"):
        load_model(path)


def test_auto_on_a_loaded_model_leaves_room_for_the_grams_not_made_yet(monkeypatch):
    """Models > Memory budget 'auto' on a loaded model: the memory available now and its layers
    held, less the Grams it has not made yet (those it holds are already out of what is available):
    memory for its layers and Grams keeps every layer, before and after it made some."""
    model = load_model(FIXTURES / "llama_gqa")
    store, grams = model.weights.layers, grams_bytes(model.config)
    total = sum(store.sizes)
    assert store.held_bytes() == total
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + grams)
    model.set_memory_budget(None)
    assert store.budget == total
    model.run(ids=IDS, request=RunRequest(values=True, use_cache=False, layers=1))  # layer 0's Grams
    held = model.grams_held()
    assert 0 < held < grams
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + grams - held)
    model.set_memory_budget(None)
    assert store.budget == total and store.kept == model.config.n_layer


def test_the_memory_line_counts_the_grams_held():
    model = load_model(FIXTURES / "llama_gqa")
    line = model.memory
    assert "Grams" not in line
    model.run(ids=IDS, request=RunRequest(values=True, use_cache=False, layers=1))
    per_layer = grams_bytes(model.config) // model.config.n_layer
    assert model.memory == f"{line}; also kept: W_O Grams for 1 of 2 layers ({format_bytes(per_layer)})"
    model.run(ids=IDS, request=VALUES)
    assert model.memory == f"{line}; also kept: W_O Grams for 2 of 2 layers ({format_bytes(2 * per_layer)})"


@pytest.mark.parametrize("made", [False, True])
@pytest.mark.parametrize("room", [0, 1 << 20])
def test_a_refused_second_model_names_what_the_chosen_budget_holds_of_a(room, made):
    """A refusal under a chosen budget names what of A it counted, A's float32 layers, and never
    A's W_O Grams, made or not: the budget does not hold them."""
    a = load_model(FIXTURES / "llama_gqa")
    if made:
        a.run(ids=IDS, request=VALUES)
        assert a.grams_held() == grams_bytes(a.config)

    def refuse(budget):
        raise BudgetTooSmall("Refused")  # (the budget is why: its room leads)
    budget = a.weights.layers.held_bytes() + room
    MB.set_memory_budget(budget)
    try:
        with pytest.raises(AttnvizError) as refused:
            load_second(refuse, a, "B")
    finally:
        MB.set_memory_budget(None)
    held = f"{a.name}'s float32 layers"
    said = str(refused.value)
    assert format_bytes(budget) != "1 MiB"  # (the budget reads more than the room it leaves)
    assert (f"all held by {held};" if room == 0 else
            f"in the 1 MiB of the {format_bytes(budget)} memory budget left beside {held}. Refused.") in said
    assert "Grams" not in said
