"""Writing GGUF files (engine/reading/gguf_write.py): every family reads back as it was, the types
per tensor, the tokenizer, the metadata, and no partial file on any failure."""

import json
import mmap
import shutil

import gguf
import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.predict import prediction_trace
from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.computing.quantized import quantized_model
from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.reading.gguf_write import write_gguf
from attnviz.engine.reading.gguf_write_tokenizer import pre_tokenizer_name
from tests.tiny import FIXTURES, tiny_text_model
from attnviz.engine.computing.request import RunRequest

Q = gguf.GGMLQuantizationType
# every fixture whose architecture attnviz's GGUF reader opens (bert and gpt2: refused below;
# gemma3_old: its query_pre_attn_scalar has no GGUF key, refused below)
READABLE = ["gemma3", "llama_bf16", "llama_gqa", "llama_headdim", "llama_mqa", "llama_rope_linear",
            "llama_rope_llama3", "llama_sharded", "mistral", "mistral_window", "phi3", "qwen2", "qwen3",
            "qwen3_yarn"]
IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4])  # past every window


def logprobs(model, ids=IDS):  # -> [T, vocab] log p(next token), float64
    trace = prediction_trace()
    model.run(ids=ids, trace=trace, request=RunRequest(use_cache=False))
    return log_softmax(model.lm_head().logits(trace.resid[-1]))


def test_the_readable_fixtures_are_every_fixture_but_the_refused():
    every = sorted(p.parent.name for p in FIXTURES.glob("*/config.json"))
    assert sorted(READABLE + ["bert", "gpt2", "gpt2_noprefix", "gemma3_old"]) == every


@pytest.mark.parametrize("family", READABLE)
def test_a_family_written_at_f32_runs_as_its_safetensors(tmp_path, family):
    w = write_gguf(FIXTURES / family, "F32", tmp_path / f"{family}.gguf")
    assert w.counts.keys() == {"F32"} and w.kept_f16 == {}
    a, b = load_model(FIXTURES / family), load_model(w.path)
    assert (b.config.n_layer, b.config.n_head, b.config.n_kv_head, b.config.sliding_window,
            b.config.layer_types) == (a.config.n_layer, a.config.n_head, a.config.n_kv_head,
                                      a.config.sliding_window, a.config.layer_types)
    np.testing.assert_allclose(b.run(ids=IDS).attentions, a.run(ids=IDS).attentions, atol=1e-5)
    np.testing.assert_allclose(logprobs(b), logprobs(a), atol=1e-4)  # through the output head too
    assert list(tmp_path.iterdir()) == [w.path]  # no temporary file left beside it


@pytest.mark.parametrize("family", ["llama_gqa", "phi3", "gemma3", "qwen2", "qwen3", "mistral_window"])
def test_a_quantized_file_holds_what_the_in_memory_quantization_gives(tmp_path, family):
    w = write_gguf(FIXTURES / family, "Q4_1", tmp_path / "m.gguf")
    from_file = load_model(w.path).run(ids=IDS).attentions
    in_memory = quantized_model(load_model(FIXTURES / family), "Q4_1").run(ids=IDS).attentions
    np.testing.assert_array_equal(from_file, in_memory)
    reader = gguf.GGUFReader(w.path)
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert all(types[n] == Q.F32 for n in types if n.endswith("norm.weight"))
    assert types["token_embd.weight"] == Q.Q4_1
    assert w.kept_f16 == {n: 48 for n in types if n.endswith("ffn_down.weight")}  # d_ff 48
    assert all(types[n] == Q.F16 for n in w.kept_f16)
    assert reader.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q4_1


def test_smollm2_q8_0_reopens_in_attnviz_with_its_metadata_and_tokenizer(smollm2, smollm2_q8_0_gguf,
                                                                        shared_quantized):
    w = smollm2_q8_0_gguf
    assert w.counts == {"Q8_0": 211, "F32": 61} and w.kept_f16 == {} and w.notices == []
    q8 = load_model(w.path)
    text = "Anna gave 12 apples to Bob; then Anna"
    got, want = q8.run(text), shared_quantized(smollm2, "Q8_0").run(text)
    assert got.tokens == want.tokens == smollm2.run(text).tokens
    np.testing.assert_array_equal(got.attentions, want.attentions)
    # the written file as gguf's own reader parses it; each key's entry there (its name, type and
    # value, merges and tokens whole) is found byte for byte in the source file
    out = gguf.GGUFReader(w.path)
    with open(smollm2.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as src:
        for key in ("tokenizer.ggml.pre", "tokenizer.ggml.model", "llama.rope.freq_base",
                    "tokenizer.ggml.bos_token_id", "llama.context_length", "general.name",
                    "tokenizer.ggml.merges", "tokenizer.ggml.tokens"):
            field = out.fields[key]
            entry = out.data[field.offset:field.offset + sum(int(p.nbytes) for p in field.parts)]
            assert src.find(entry.tobytes()) >= 0, key
    assert len(out.fields["tokenizer.ggml.merges"].data) > 40_000
    assert out.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q8_0


def test_a_byte_level_tokenizer_json_is_written_as_llama_cpp_keys(tmp_path):
    folder = tiny_text_model(tmp_path / "m")
    w = write_gguf(folder, "F32", tmp_path / "m.gguf")
    assert w.notices == []
    a, b = load_model(folder), load_model(w.path)
    text = "the theme then: 42 ünïcode"
    ra, rb = a.run(text), b.run(text)
    assert rb.tokens == ra.tokens and rb.input_ids.tolist() == ra.input_ids.tolist()
    np.testing.assert_allclose(rb.attentions, ra.attentions, atol=1e-6)
    r = gguf.GGUFReader(w.path)
    assert r.fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert r.fields["tokenizer.ggml.pre"].contents() == "gpt2"
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    assert len(tokens) == a.config.vocab_size and tokens[-1] == "Ġthe"


def test_pre_tokenizer_names_as_llama_cpp_knows_them():
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    assert pre_tokenizer_name(byte_level) == "gpt2"
    assert pre_tokenizer_name({"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level]}) == "smollm"
    llama3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
              "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    split = {"type": "Split", "pattern": {"Regex": llama3}, "behavior": "Isolated", "invert": False}
    plain = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}
    assert pre_tokenizer_name(json.loads(json.dumps({"type": "Sequence", "pretokenizers": [split, plain]}))) \
        == "llama-bpe"
    qwen2 = llama3.replace("\\p{N}{1,3}", "\\p{N}")
    assert pre_tokenizer_name({"type": "Sequence", "pretokenizers": [
        dict(split, pattern={"Regex": qwen2}), plain]}) == "qwen2"
    assert pre_tokenizer_name({"type": "Metaspace"}) is None
    assert pre_tokenizer_name(None) is None


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_families_attnviz_cannot_read_back_are_refused(tmp_path, family):
    with pytest.raises(ModelLoadError, match=f"a {family} model is not written to GGUF: attnviz opens "
                                             "GGUF files of gemma3, llama, mistral, phi3, qwen2, qwen3"):
        write_gguf(FIXTURES / family, "Q8_0", tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_a_config_gguf_cannot_carry_is_refused_naming_it_and_leaves_no_file(tmp_path):
    with pytest.raises(ModelLoadError, match="query_pre_attn_scalar is 24.0, but a GGUF file of it "
                                             "would be read as 16.0"):
        write_gguf(FIXTURES / "gemma3_old", "Q8_0", tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def _qwen2_window(tmp_path, max_window_layers):
    """The qwen2 fixture with a 4-token window from layer `max_window_layers` on."""
    src = shutil.copytree(FIXTURES / "qwen2", tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(use_sliding_window=True, sliding_window=4, max_window_layers=max_window_layers)
    del cfg["layer_types"]
    (src / "config.json").write_text(json.dumps(cfg))
    return src


def test_a_qwen2_window_on_every_layer_reads_back_and_on_some_is_refused(tmp_path):
    """A GGUF's sliding_window names no first windowed layer: read back it is on every layer, so a
    Qwen2 model windowed from max_window_layers 0 is written, one windowed from layer 1 refused."""
    w = write_gguf(_qwen2_window(tmp_path / "every", 0), "F32", tmp_path / "every.gguf")
    assert [load_model(w.path).config.window(i) for i in range(2)] == [4, 4]
    with pytest.raises(ModelLoadError, match="its layer_types is .*'full_attention', 'sliding_attention'"):
        write_gguf(_qwen2_window(tmp_path / "some", 1), "F32", tmp_path / "some.gguf")


def test_bad_type_output_and_source(tmp_path):
    src = FIXTURES / "llama_gqa"
    with pytest.raises(InputError, match="cannot quantize to 'Q2_K': the types are Q8_0, Q5_1, Q5_0, "
                                         "Q4_1, Q4_0, F16, BF16, F32"):
        write_gguf(src, "Q2_K", tmp_path / "m.gguf")
    with pytest.raises(InputError, match="the folder .*missing does not exist"):
        write_gguf(src, "Q8_0", tmp_path / "missing" / "m.gguf")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="the folder .*file is not a folder"):
        write_gguf(src, "Q8_0", tmp_path / "file" / "m.gguf")
    with pytest.raises(InputError, match="it is a folder"):
        write_gguf(src, "Q8_0", tmp_path)
    with pytest.raises(ModelLoadError, match="no model at"):
        write_gguf(tmp_path / "nothing", "Q8_0", tmp_path / "m.gguf")
    with pytest.raises(ModelLoadError, match="neither a GGUF file nor a model folder"):
        write_gguf(tmp_path / "file", "Q8_0", tmp_path / "m.gguf")
    broken = tmp_path / "broken"
    shutil.copytree(src, broken)
    (broken / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(ModelLoadError, match="not a safetensors file"):
        write_gguf(broken, "Q8_0", tmp_path / "m.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "file"]


def test_a_failure_while_writing_leaves_no_partial_file_and_the_old_file_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "m.gguf"
    out.write_bytes(b"the old file")
    calls = []

    def fail_on_the_third(writer, data):  # the disk fills up at the third tensor
        calls.append(len(data))
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(writer, data)

    real = gguf.GGUFWriter.write_tensor_data
    monkeypatch.setattr(gguf.GGUFWriter, "write_tensor_data", fail_on_the_third)
    with pytest.raises(InputError, match=f"cannot write {out}: no space left on device"):
        write_gguf(FIXTURES / "llama_gqa", "Q8_0", out)
    assert out.read_bytes() == b"the old file"
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]


@pytest.mark.parametrize("source_type", [Q.Q5_0, Q.Q8_0, Q.F16])
def test_a_gguf_source_of_another_type_is_written_again_at_the_type(tmp_path, source_type):
    from tests.gguf_files import gguf_tensors
    from tests.gguf_files import write_gguf as write_test_gguf

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    source = write_test_gguf(tmp_path / "src.gguf", cfg, tensors, source_type)
    written = write_gguf(source, "Q4_0", tmp_path / "out.gguf")
    np.testing.assert_array_equal(load_model(written.path).run(ids=IDS).attentions,
                                  quantized_model(load_model(source), "Q4_0").run(ids=IDS).attentions)
    out_types = {t.name: t.tensor_type for t in gguf.GGUFReader(written.path).tensors}
    assert out_types["blk.0.attn_q.weight"] == Q.Q4_0 and out_types["blk.0.ffn_down.weight"] == Q.F16
    assert out_types["blk.0.attn_norm.weight"] == Q.F32


def test_a_tokenizer_with_more_ids_than_the_embedding_is_not_written(tmp_path):
    folder = tiny_text_model(tmp_path / "m")
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok["added_tokens"] = [{"id": 400, "content": "<extra>", "special": True}]
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    cfg = json.loads((folder / "config.json").read_text())
    w = write_gguf(folder, "F32", tmp_path / "m.gguf")
    assert w.notices == [(f"tokenizer not written: tokenizer.json has token id 400, past the model's "
                         f"{cfg['vocab_size']} embedding rows; the file takes token ids")]
    assert "tokenizer.ggml.tokens" not in gguf.GGUFReader(w.path).fields
