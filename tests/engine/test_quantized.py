"""A model quantized in memory (engine/computing/quantized.py): gguf's quantize -> dequantize round
trip on every 2-D weight matrix, F16 where rows do not fit the blocks, every family."""

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize
from safetensors.numpy import load_file

from attnviz.engine import load_model
from attnviz.engine.computing.quantized import quantized_model
from attnviz.engine.errors import InputError
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading.gguf_file import open_gguf
from attnviz.engine.reading.quantize import QUANT_TYPES, quant_type, quantize_rows, round_trip
from tests.gguf_files import family_gguf, gguf_tensors, write_gguf
from tests.tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

Q = gguf.GGMLQuantizationType
FAMILIES = sorted(p.parent.name for p in FIXTURES.glob("*/config.json"))
IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3])


def gguf_round_trip(w: np.ndarray, qtype) -> np.ndarray:  # gguf's own, on the whole matrix
    return dequantize(quantize(w.astype(np.float32), qtype), qtype).reshape(w.shape)


def test_an_unknown_type_is_refused_in_one_line_naming_the_types(tmp_path):
    model = load_model(FIXTURES / "llama_gqa")
    with pytest.raises(InputError) as err:
        quantized_model(model, "Q3_K")
    assert "\n" not in str(err.value) and "'Q3_K'" in str(err.value)
    assert all(t in str(err.value) for t in QUANT_TYPES)
    assert quant_type("q8_0") == Q.Q8_0  # any case
    with pytest.raises(InputError, match="llama_gqa as Q8_0 is a copy quantized in memory: quantize "
                                         "the model it was made from instead"):
        quantized_model(quantized_model(model, "Q8_0"), "Q4_0")


@pytest.mark.parametrize("qtype", QUANT_TYPES)
def test_round_trip_equals_gguf_on_the_whole_matrix(qtype):
    w = np.random.default_rng(0).normal(size=(3000, 96)).astype(np.float32)  # several pieces
    data, used = quantize_rows(w, Q[qtype])
    np.testing.assert_array_equal(data, quantize(w, Q[qtype]))  # gguf's bytes, bit for bit
    got, used = round_trip(w, Q[qtype])
    assert used == Q[qtype]
    np.testing.assert_array_equal(got, gguf_round_trip(w, Q[qtype]))
    odd, used = round_trip(w[:, :48], Q[qtype])  # 48 values a row: not whole 32-value blocks
    assert used == (Q.F16 if qtype.startswith("Q") else Q[qtype])
    np.testing.assert_array_equal(odd, gguf_round_trip(w[:, :48], used))


def test_llama_weights_are_gguf_round_trips_and_odd_rows_f16():
    folder = FIXTURES / "llama_gqa"
    model = load_model(folder)
    q8 = quantized_model(model, "Q8_0")
    assert q8.name == f"{model.name} as Q8_0" and q8.quantization == "Q8_0"
    assert q8.config is model.config and q8.tokenizer is model.tokenizer
    hf = load_file(str(folder / "model.safetensors"))
    a = "model.layers.1."
    want_qkv = np.concatenate([gguf_round_trip(hf[a + f"self_attn.{n}_proj.weight"], Q.Q8_0).T
                               for n in "qkv"], axis=1)
    layer = q8.weights.layers[1]
    np.testing.assert_array_equal(layer.w_qkv, want_qkv)
    # d_ff = 48: down_proj's rows do not fit Q8_0's 32-value blocks -> F16, and the notice says so
    np.testing.assert_array_equal(layer.w_out, hf[a + "mlp.down_proj.weight"].astype(np.float16)
                                  .astype(np.float32).T)
    assert "2 matrices kept at F16" in q8.notice and "down_proj" in q8.notice and "48" in q8.notice
    np.testing.assert_array_equal(layer.norm1[0], hf[a + "input_layernorm.weight"])  # norms: float32
    emb = hf["model.embed_tokens.weight"]
    np.testing.assert_array_equal(q8.weights.tok_emb[np.array([0, 5, 47])],
                                  gguf_round_trip(emb, Q.Q8_0)[[0, 5, 47]])


def test_gpt2_conv1d_is_quantized_along_its_input_and_position_embeddings_stay():
    folder = FIXTURES / "gpt2"
    model = load_model(folder)
    q4 = quantized_model(model, "Q4_0")
    hf = load_file(str(folder / "model.safetensors"))
    c_fc = hf["transformer.h.0.mlp.c_fc.weight"]  # Conv1D [in, out]: a GGUF row is a column here
    c_proj = hf["transformer.h.0.mlp.c_proj.weight"]  # [d_ff, d_model] = [192, 48]
    assert c_proj.shape[0] % 32 == 0 and c_proj.shape[1] % 32 != 0  # only its columns fit
    layer = q4.weights.layers[0]
    np.testing.assert_array_equal(layer.w_out, gguf_round_trip(c_proj.T, Q.Q4_0).T)
    np.testing.assert_array_equal(layer.w_in, c_fc.astype(np.float16).astype(np.float32))
    assert "transformer.h.0.mlp.c_fc.weight (48 a row)" in q4.notice
    np.testing.assert_array_equal(np.asarray(q4.weights.pos_emb), hf["transformer.wpe.weight"])


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_quantizes_and_runs(family):
    model = load_model(FIXTURES / family)
    ids = IDS[IDS < model.config.vocab_size]
    want = model.run(ids=ids, request=RunRequest(use_cache=False)).attentions
    for qtype in ("Q4_0", "BF16"):
        q = quantized_model(model, qtype)
        got = q.run(ids=ids, request=RunRequest(use_cache=False)).attentions
        assert got.shape == want.shape and np.isfinite(got).all()
        if qtype == "BF16" and family == "llama_bf16":  # BF16 values: nothing to round
            np.testing.assert_array_equal(got, want)
        else:
            assert not np.array_equal(got, want)  # the weights did change
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
    f16 = quantized_model(model, "F16").run(ids=ids, request=RunRequest(use_cache=False)).attentions
    np.testing.assert_allclose(f16, want, atol=0.02)


def test_a_gguf_source_quantizes_as_its_safetensors_does(tmp_path):
    folder = FIXTURES / "llama_gqa"
    cfg, tensors = gguf_tensors(folder)
    path = write_gguf(tmp_path / "llama_gqa.gguf", cfg, tensors)
    from_file = quantized_model(load_model(path), "Q5_1")
    from_folder = quantized_model(load_model(folder), "Q5_1")
    assert "2 matrices kept at F16" in from_file.notice and "2 matrices kept at F16" in from_folder.notice
    assert "blk.0.ffn_down.weight (48 a row)" in from_file.notice
    np.testing.assert_allclose(from_file.run(ids=IDS).attentions, from_folder.run(ids=IDS).attentions,
                               atol=1e-5)


@pytest.mark.parametrize("family", ["qwen3", "phi3", "gemma3"])
def test_gguf_families_quantize_and_match_their_safetensors(tmp_path, family):
    path = family_gguf(FIXTURES / family, tmp_path / f"{family}.gguf")
    a = quantized_model(load_model(path), "Q8_0").run(ids=IDS).attentions
    b = quantized_model(load_model(FIXTURES / family), "Q8_0").run(ids=IDS).attentions
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.fixture
def smollm2_q8_0(smollm2, shared_quantized):
    """SmolLM2 quantized to Q8_0: a new Model each test over the copy the session quantized once
    (tests/shared_models.py)."""
    return shared_quantized(smollm2, "Q8_0")


@pytest.fixture
def smollm2_q4_0(smollm2, shared_quantized):
    return shared_quantized(smollm2, "Q4_0")


def test_smollm2_q8_0_is_close_and_its_weights_are_gguf_round_trips(smollm2, smollm2_q8_0,
                                                                      smollm2_q4_0):
    q8 = smollm2_q8_0
    assert q8.notice is None  # every row of SmolLM2 fits 32-value blocks
    text = "The cat sat on the mat, and the dog sat on the rug."
    want = smollm2.run(text, request=RunRequest(use_cache=False)).attentions
    got = q8.run(text).attentions
    assert np.abs(got - want).mean() < 1e-3 and np.abs(got - want).max() < 0.1
    reader = open_gguf(smollm2.path)  # (gguf's reader, the tokens read in one pass)
    t = next(t for t in reader.tensors if t.name == "blk.3.attn_output.weight")
    src = dequantize(t.data, t.tensor_type).reshape(576, 576)  # the shipped Q4_1's values
    np.testing.assert_array_equal(np.asarray(q8.weights.layers[3].w_o).T, gguf_round_trip(src, Q.Q8_0))
    q4 = smollm2_q4_0.run(text).attentions
    assert np.abs(q4 - want).mean() > np.abs(got - want).mean()  # 4 bits move more than 8


def test_a_quantized_model_keeps_to_the_memory_budget(smollm2, smollm2_q4_0):
    text = "Anna met Bob, and then Anna"
    full = smollm2_q4_0.run(text, request=RunRequest(use_cache=False)).attentions
    one = max(smollm2.weights.layers.sizes)
    MB.set_memory_budget(3 * one)
    try:
        small = quantized_model(smollm2, "Q4_0")
    finally:
        MB.set_memory_budget(None)
    assert small.weights.layers.kept == 2
    np.testing.assert_array_equal(small.run(text, request=RunRequest(use_cache=False)).attentions, full)
    np.testing.assert_array_equal(small.run(text, request=RunRequest(use_cache=False)).attentions, full)  # re-expanded


def test_a_source_that_no_longer_opens_is_a_load_error(tmp_path):
    import shutil

    from attnviz.engine.errors import ModelLoadError

    folder = tmp_path / "m"
    shutil.copytree(FIXTURES / "llama_gqa", folder)
    model = load_model(folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        quantized_model(model, "Q8_0")
    assert Path(model.path) == folder


def test_smollm2s_table_is_shared_where_requantizing_leaves_its_bytes_and_equals_gguf_otherwise(
        smollm2, smollm2_q8_0, smollm2_q4_0):
    reader = open_gguf(smollm2.path)  # (gguf's reader, the tokens read in one pass)
    t = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert t.tensor_type == Q.Q8_0  # as shipped: Q8_0 of a Q8_0 table gives its bytes back
    q8 = smollm2_q8_0
    assert q8.weights.tok_emb is smollm2.weights.tok_emb  # one table held, not two
    assert q8.weights.head.unembed is smollm2.weights.head.unembed
    q4 = smollm2_q4_0
    table = q4.weights.tok_emb
    assert table is not smollm2.weights.tok_emb and table.qtype == Q.Q4_0
    src = dequantize(t.data, t.tensor_type).reshape(table.shape)  # requantized a block of rows at a time:
    np.testing.assert_array_equal(table.data, gguf.quants.quantize(src, Q.Q4_0))  # gguf's bytes on the whole


def test_text_for_a_gguf_without_a_tokenizer_is_refused_for_that_reason_alone(tmp_path):
    """The refusal gives the file's own reason, not a quantized copy's F16 notice, nor a
    tokenizer.json (a folder's) once the file is gone from its name."""
    from tests.gguf_files import tiny_gqa_files

    path, _ = tiny_gqa_files("gguf", tmp_path)
    model = load_model(path)
    copy = quantized_model(model, "Q4_0")
    assert "kept at F16" in copy.notice  # (shown beside the model, as before)
    why = "this GGUF holds no tokenizer (it sets no tokenizer.ggml.model): type token ids instead, e.g. 5, 17, 3"
    for m in (model, copy):
        with pytest.raises(InputError) as err:
            m.run("hello")
        assert str(err.value) == f"{m.name}: {why}"
    path.unlink()
    with pytest.raises(InputError) as err:
        model.run("hello")
    assert str(err.value) == f"tiny: {why}"
