"""Model B refused beside model A reads as two sentences: what could not be loaded, with the room the
chosen budget left it, then B's own refusal in its words, never "B (… left beside A): For B, …"
(chained colons). Nothing of either is lost: the budget, the room, what of A it holds, B's largest
layer."""

import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.pair_memory import load_second
from attnviz.engine.errors import AttnvizError
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading.byte_sizes import format_bytes
from tiny import FIXTURES

LLAMA = FIXTURES / "llama_gqa"


pytestmark = pytest.mark.usefixtures("auto_budget")  # (tests/engine/conftest.py)


def test_a_second_model_too_big_for_the_room_left_is_two_sentences():
    a = load_model(LLAMA)
    held = a.weights.layers.held_bytes()
    largest = max(a.weights.layers.sizes)
    room = largest // 2  # (B, the same model, needs its largest layer)
    MB.set_memory_budget(held + room)
    with pytest.raises(AttnvizError) as refused:
        load_second(lambda budget: load_model(LLAMA, budget=budget), a, "model B (llama_gqa)")
    said = str(refused.value)
    lead = (f"Could not load model B (llama_gqa) in the {format_bytes(room, 'down')} of the "
            f"{format_bytes(held + room)} memory budget left beside {a.name}'s float32 layers. ")
    assert said.startswith(lead), said
    b_says = said[len(lead):]
    assert b_says.startswith(f"For {a.name}, a memory budget of {format_bytes(room, 'down')} is less than one "
                             f"layer expanded to float32 ({format_bytes(largest, 'up')})"), b_says
    assert ": " not in said and said.endswith("."), said


def test_a_budget_all_held_by_a_is_two_sentences():
    a = load_model(LLAMA)
    MB.set_memory_budget(a.weights.layers.held_bytes())
    with pytest.raises(AttnvizError) as refused:
        load_second(lambda budget: load_model(LLAMA, budget=budget), a, "model B (llama_gqa)")
    said = str(refused.value)
    assert said == (f"Could not load model B (llama_gqa). The memory budget of "
                    f"{format_bytes(a.weights.layers.held_bytes())} is all held by {a.name}'s float32 layers; "
                    "give a larger --memory-budget for two models."), said
