"""What a generation's K and V take in memory: each step's kv_bytes are its T tokens' own (the
calculator's figure), kv_held the arrays holding them with the room they keep for the next
positions (what the process holds), and generate.kv_positions, which the window's guard counts,
bounds those arrays at every step and, while a step copies them, the old beside the new; on the
float32 steps (one array a layer) and on the kernels' (one buffer of every layer)."""

import pytest

from attnviz.engine.computing import generate as G
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.computing.trace import KV_ROOM, kv_room
from attnviz.engine import load_model
from tiny import tiny_llama

PROMPT = [3, 1, 4, 1, 5, 9, 2]
STEPS = 340  # past the prompt's room and three copies after it, into room of more than KV_ROOM


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny Llama of 512 positions whose matrices all divide into Q8_0's blocks of 32."""
    return tiny_llama(tmp_path_factory.mktemp("long") / "llama", positions=512, vocab=50, d_ff=64,
                     tie_word_embeddings=True)


def check_steps(model, gen) -> None:
    per = G.kv_bytes_per_position(model.config)
    T0, copies, tight = len(PROMPT), 0, 0
    for prev, step in zip([None, *gen.steps], gen.steps):
        held, peak = G.kv_positions(T0, step.T)
        assert step.kv_bytes == step.T * per  # the tokens' own
        assert step.kv_bytes <= step.kv_held <= held * per, step.T  # room held, within the count
        tight += step.kv_held == held * per
        if prev is not None and step.kv_held != prev.kv_held:  # copied: the old arrays beside the new
            copies += 1
            assert prev.kv_held + step.kv_held <= peak * per, step.T
    assert copies >= 3 and tight >= 3  # (the count is what the arrays hold right after a copy)
    assert sum(s.kv_held > s.kv_bytes for s in gen.steps) > len(gen.steps) // 2  # (room mostly held)
    assert gen.steps[-1].T + kv_room(gen.steps[-1].T) > gen.steps[-1].T + KV_ROOM


def test_float32_steps_hold_what_kv_positions_counts(folder):
    model = load_model(folder)
    gen = G.generate(model, ids=PROMPT, max_new=STEPS, ignore_eos=True)
    assert len(gen.steps) == STEPS
    check_steps(model, gen)


def test_the_kernels_steps_hold_what_kv_positions_counts(folder, tmp_path, monkeypatch, cap_kernels):
    """Every matrix in Q8_0 blocks and the kernels on one thread, as the window runs them: every
    step after the prompt runs its layers in one call, on one buffer of every layer's K and V."""
    pytest.importorskip("numba")
    from gguf import GGMLQuantizationType as Q

    from attnviz.engine.computing import onerow_stack
    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.reading import qpack
    from gguf_files import gguf_tensors, write_gguf

    cap_kernels(1)  # (the window's cap: the one-call steps)
    stacked = []
    whole = onerow_stack.stacked_rows
    monkeypatch.setattr(onerow_stack, "stacked_rows", lambda *a: stacked.append(whole(*a)) or stacked[-1])
    cfg, tensors = gguf_tensors(folder)
    qpack.ask_for_kernels()
    try:
        qm.warm([Q.Q8_0])
        model = load_gguf(write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0))
        assert model.weights.layers.packed_view(0) is not None
        gen = G.generate(model, ids=PROMPT, max_new=STEPS, ignore_eos=True)
        check_steps(model, gen)
    finally:
        qpack.ask_for_kernels(False)
    assert len(stacked) == STEPS - 1 and all(stacked)


def test_kv_positions_counts_room_and_a_copys_old_arrays():
    assert G.kv_positions(7, 7) == (7, 7)  # the prompt's arrays: its positions
    assert G.kv_positions(7, 8) == (8 + KV_ROOM, 7 + 8 + KV_ROOM)  # the first step's copy beside them
    held, peak = G.kv_positions(7, 1000)
    assert held == 1000 + 250 and peak == 999 + 249 + 1250  # about 2.5 x the tokens' at a copy
