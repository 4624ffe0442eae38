"""One validation layer for everything read from disk: each corruption of a tiny
checkpoint gives one ModelLoadError, at load, naming the file, the field, the value found and what
was expected. A FIFO, device or socket is refused before anything opens it; an unreadable file says
"permission denied"; NaN/Inf weights are refused naming the tensor."""

import builtins
import io
import json
import os
import re
import shutil
import threading
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from attnviz.engine import ModelLoadError, config_from_dict, load_model
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.reading.gguf_file import is_gguf
from tiny import FIXTURES
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import llama_config, llama_tensors, tiny_llama, write_model

V = gguf.GGUFValueType


def _fixture(tmp_path, name):
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _set(**fields):
    return lambda cfg: cfg.update(fields)


def _drop(key):
    return lambda cfg: cfg.pop(key)


# ---- config.json: (fixture, edit, what the message must say) --------------------------------------

CONFIG_CASES = [
    ("llama", _set(rms_norm_eps="x"), "sets rms_norm_eps to 'x', but it must be a positive finite number"),
    ("llama", _set(rms_norm_eps=-1), "sets rms_norm_eps to -1, but it must be a positive finite number"),
    ("llama", _set(rms_norm_eps=0), "sets rms_norm_eps to 0, but it must be a positive finite number"),
    ("llama", _set(hidden_act="gelu_foo"), "sets hidden_act to 'gelu_foo', but it must be one of gelu, "),
    ("llama", _set(hidden_act=None, model_type="llama"), None),  # null: the default, silu
    ("llama", _set(rope_parameters="x"), "sets rope_parameters to 'x', but it must be an object"),
    ("llama", _set(rope_scaling=[1, 2]), "sets rope_scaling to [1, 2], but it must be an object"),
    ("llama", _set(rope_parameters={"rope_type": 5}), "sets rope_parameters.rope_type to 5, but it must be a string"),
    ("llama", _set(rope_parameters={"rope_type": "dynamic"}), "sets rope_parameters.rope_type to 'dynamic', which is not supported"),
    ("llama", _set(rope_parameters={"rope_theta": "big"}),
     "sets rope_parameters.rope_theta to 'big', but it must be a positive finite number"),
    ("llama", _set(rope_theta=-1.0), "sets rope_theta to -1.0, but it must be a positive finite number"),
    ("llama", _set(num_key_value_heads=3), "sets num_key_value_heads to 3, but it must be a divisor of "
                                           "num_attention_heads = 8"),
    ("llama", _set(num_key_value_heads=16), "sets num_key_value_heads to 16, but it must be a divisor of "
                                            "num_attention_heads = 8"),
    ("llama", _set(num_attention_heads=5), "sets hidden_size to 32, but it must be a multiple of "
                                           "num_attention_heads = 5"),
    ("llama", _set(head_dim=5), "sets head_dim to 5, but it must be an even head width"),
    ("llama", _set(head_dim="4"), "sets head_dim to '4', but it must be a whole number"),
    ("llama", _set(max_position_embeddings=0), "sets max_position_embeddings to 0, but it must be a whole "
                                               "number (positions) in 1.."),
    ("llama", _set(max_position_embeddings=-5), "sets max_position_embeddings to -5, but it must be"),
    ("llama", _set(vocab_size="many"), "sets vocab_size to 'many', but it must be a whole number"),
    ("llama", _set(hidden_size=32.0), "sets hidden_size to 32.0, but it must be a whole number (hidden size"),
    ("llama", _set(num_hidden_layers=True), "sets num_hidden_layers to true, but it must be a whole number"),
    ("llama", _set(num_hidden_layers=10**9), "sets num_hidden_layers to 1000000000, but it must be a whole "
                                             "number (layers, n_layer) in 1..1,024"),
    ("llama", _drop("hidden_size"), "does not set hidden_size, which must be a whole number"),
    ("llama", _set(intermediate_size=None), "sets intermediate_size to null, but it must be a whole number"),
    ("llama", _set(attention_bias="false"), "sets attention_bias to 'false', but it must be true or false"),
    ("llama", _set(mlp_bias=1), "sets mlp_bias to 1, but it must be true or false"),
    ("llama", _set(partial_rotary_factor="half"), "sets partial_rotary_factor to 'half', but it must be a number"),
    ("llama", _set(model_type=["llama"]), "sets model_type to ['llama'], which is not supported"),
    ("llama", _set(model_type="mamba"), "sets model_type to 'mamba', which is not supported"),
    ("mistral", _set(sliding_window="x"), "sets sliding_window to 'x', but it must be a whole number"),
    ("mistral", _set(sliding_window=-3), "sets sliding_window to -3, but it must be a whole number"),
    ("bert", _set(hidden_act="swiglu"), "sets hidden_act to 'swiglu', but it must be one of"),
    ("bert", _set(layer_norm_eps="1e-12"), "sets layer_norm_eps to '1e-12', but it must be a positive finite"),
    ("bert", _set(head_dim=10), "sets head_dim to 10, but it must be hidden_size / num_attention_heads = 48 / 4"),
    ("bert", _set(type_vocab_size="2"), "sets type_vocab_size to '2', but it must be a whole number"),
    ("bert", _set(position_embedding_type="relative_key"), "sets position_embedding_type to "
                                                          "'relative_key', which is not supported for BERT"),
    ("gpt2", _set(activation_function="gelu_foo"), "sets activation_function to 'gelu_foo', but it must be one of"),
    ("gpt2", _set(layer_norm_epsilon=float("nan")), "sets layer_norm_epsilon to nan, but it must be a positive"),
    ("gpt2", _set(n_embd=50), "sets n_embd to 50, but it must be a multiple of n_head = 4"),
    ("gpt2", _set(scale_attn_by_inverse_layer_idx="no"),
     "sets scale_attn_by_inverse_layer_idx to 'no', but it must be true or false"),
]


def _folder(tmp_path, kind):
    if kind == "llama":
        return tiny_llama(tmp_path / "m")
    return _fixture(tmp_path, kind)


@pytest.mark.parametrize("kind, edit, message", CONFIG_CASES,
                         ids=[f"{k}-{m.split(' ')[0] if m else 'ok'}-{i}"
                              for i, (k, _, m) in enumerate(CONFIG_CASES)])
def test_config_field_named_with_value_and_expectation(tmp_path, kind, edit, message):
    folder = _folder(tmp_path, kind)
    _edit_json(folder / "config.json", edit)
    if message is None:
        load_model(folder)
        return
    with pytest.raises(ModelLoadError) as err:
        load_model(folder)
    text = str(err.value)
    assert str(folder / "config.json") in text and message in text, text
    assert "\n" not in text


def test_unknown_activation_fails_at_load_not_at_the_first_run(tmp_path):
    folder = tiny_llama(tmp_path / "m", hidden_act="quick_gelu")
    with pytest.raises(ModelLoadError, match="sets hidden_act to 'quick_gelu', but it must be one of"):
        load_model(folder)


def test_every_activation_a_config_may_name_has_a_function_in_the_forward_pass():
    from attnviz.engine.computing.layers import ACTIVATIONS as FUNCTIONS
    from attnviz.engine.reading.config import ACTIVATIONS as NAMES

    assert set(NAMES) == set(FUNCTIONS)


@pytest.mark.parametrize("content, message", [
    (b"[1, 2]", "holds a list, expected a JSON object"),
    (b"{\"model_type\": ", "is not valid JSON: Expecting value at line 1 column 16"),
    (b"\xff\xfe{}", "is not UTF-8 text"),
    (b"[" * 100_000, "is not valid JSON"),
])
def test_config_file_that_is_not_a_json_object(tmp_path, content, message):
    folder = tiny_llama(tmp_path / "m")
    (folder / "config.json").write_bytes(content)
    with pytest.raises(ModelLoadError, match="config.json") as err:
        load_model(folder)
    assert message in str(err.value)


def test_config_from_dict_names_the_source_and_its_own_field_names():
    names = {"rms_norm_eps": "llama.attention.layer_norm_rms_epsilon"}
    with pytest.raises(ModelLoadError, match=r"^x\.gguf sets llama\.attention\.layer_norm_rms_epsilon to "
                                             r"'e', but it must be a positive finite number$"):
        config_from_dict(llama_config(rms_norm_eps="e"), source="x.gguf", names=names)
    with pytest.raises(ModelLoadError, match="config.json holds a list"):
        config_from_dict([])
    with pytest.raises(ModelLoadError, match=r"^config\.json does not set model_type, which must be one of the "
                                             r"supported types \(bert, .*\)$"):
        config_from_dict({k: v for k, v in llama_config().items() if k != "model_type"})


# ---- model.safetensors.index.json -----------------------------------------------------------------

INDEX_CASES = [
    (lambda d: d.update(weight_map=list(d["weight_map"])), "sets weight_map to a list, but it must be an object"),
    (lambda d: d["weight_map"].update({"model.norm.weight": 3}),
     "sets weight_map['model.norm.weight'] to 3, but it must be the name of a shard file"),
    (lambda d: d["weight_map"].update({"model.norm.weight": "../elsewhere.safetensors"}),
     "to '../elsewhere.safetensors', but it must be the name of a shard file in the same folder"),
    (lambda d: d.pop("weight_map"), "does not set weight_map, which must be an object of tensor name -> shard file name"),
    (lambda d: d.update(weight_map={}), "sets weight_map to an empty object, but it must be an object"),
    (lambda d: d["weight_map"].update({"model.norm.weight": "model-00009.safetensors"}),
     "names shards that are missing: model-00009.safetensors"),
]


@pytest.mark.parametrize("edit, message", INDEX_CASES, ids=[m.split(",")[0][:40] for _, m in INDEX_CASES])
def test_shard_index_weight_map_checked(tmp_path, edit, message):
    folder = _fixture(tmp_path, "llama_sharded")
    _edit_json(folder / "model.safetensors.index.json", edit)
    with pytest.raises(ModelLoadError, match="model.safetensors.index.json") as err:
        load_model(folder)
    assert message in str(err.value)


def test_shard_index_that_is_not_json(tmp_path):
    folder = _fixture(tmp_path, "llama_sharded")
    (folder / "model.safetensors.index.json").write_text("{\"weight_map\": [")
    with pytest.raises(ModelLoadError, match=r"model.safetensors.index.json is not valid JSON"):
        load_model(folder)


def test_sharded_fixture_still_loads(tmp_path):
    assert load_model(_fixture(tmp_path, "llama_sharded")).config.n_layer == 2


# ---- tokenizer.json: ids within the vocabulary and the embedding rows ------------------------------

def _tokenizer_spec(n_tokens: int) -> dict:
    """A word-level tokenizer.json over tokens w0..w{n-1}, BOS (id 0) in front of every text."""
    from tokenizers import Tokenizer, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    vocab = {"<s>": 0, "<unk>": 1, **{f"w{i}": i for i in range(2, n_tokens)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return json.loads(tok.to_str())


def _with_tokenizer(tmp_path, edit=None, n_tokens=50):
    folder = tiny_llama(tmp_path / "m")  # vocab_size 50: embedding rows 0..49
    spec = _tokenizer_spec(n_tokens)
    if edit:
        edit(spec)
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    return folder


def test_valid_tokenizer_loads_and_runs(tmp_path):
    model = load_model(_with_tokenizer(tmp_path))
    result = model.run("w3 w49 w7")
    assert result.input_ids.tolist() == [0, 3, 49, 7]
    np.testing.assert_allclose(result.attentions.sum(-1), 1, atol=1e-5)


TOKENIZER_CASES = [
    (None, 60, "gives token 'w59' the id 59 (model.vocab), but the model's embedding has 50 rows "
               "(config.json vocab_size), so ids must be in 0..49"),
    (lambda s: s["model"]["vocab"].update(w9=50), None, "gives token 'w9' the id 50 (model.vocab)"),
    (lambda s: s["model"]["vocab"].update(w9="9"), None, "sets model.vocab['w9'] to '9', but it must be a token id"),
    (lambda s: s["model"]["vocab"].update(w9=-1), None, "sets model.vocab['w9'] to -1, but it must be a token id"),
    (lambda s: s["added_tokens"][0].update(id=99), None, "gives token '<s>' the id 99 (added_tokens[0])"),
    (lambda s: s["added_tokens"][0].update(id="0"), None, "sets added_tokens[0].id to '0', but it must be a token id"),
    (lambda s: s["post_processor"]["special_tokens"]["<s>"].update(ids=[77]), None,
     "gives token '<s>' the id 77 (post_processor.special_tokens['<s>'].ids)"),
    (lambda s: s["post_processor"]["special_tokens"]["<s>"].update(ids="0"), None,
     "sets post_processor.special_tokens['<s>'].ids to '0', but it must be a list of token ids"),
    (lambda s: s.update(model=[1]), None, "sets model to [1], but it must be an object with a vocab"),
    (lambda s: s["model"].update(vocab="x"), None, "sets model.vocab to a string, but it must be an object"),
    (lambda s: s.update(added_tokens={}), None, "sets added_tokens to an object, but it must be a list"),
]


@pytest.mark.parametrize("edit, n_tokens, message", TOKENIZER_CASES,
                         ids=[m.split(" is ")[0].split(" gives")[0][:40] for _, _, m in TOKENIZER_CASES])
def test_tokenizer_ids_checked_at_load(tmp_path, edit, n_tokens, message):
    folder = _with_tokenizer(tmp_path, edit, n_tokens or 50)
    with pytest.raises(ModelLoadError) as err:
        load_model(folder)
    text = str(err.value)
    assert str(folder / "tokenizer.json") in text and message in text, text


def test_tokenizer_that_is_not_json(tmp_path):
    folder = tiny_llama(tmp_path / "m")
    (folder / "tokenizer.json").write_text("{\"model\": ")
    with pytest.raises(ModelLoadError, match="tokenizer.json is not valid JSON"):
        load_model(folder)


# ---- weights: dtypes, non-finite values -----------------------------------------------------------

@pytest.mark.parametrize("dtype, name", [(np.int8, "I8"), (np.bool_, "BOOL"), (np.int64, "I64")])
def test_tensor_of_wrong_dtype_is_called_that_not_missing(tmp_path, dtype, name):
    cfg = llama_config()
    t = llama_tensors(cfg)
    key = "model.layers.1.self_attn.k_proj.weight"
    t[key] = t[key].astype(dtype)
    with pytest.raises(ModelLoadError, match=rf"tensor {key} in model.safetensors is stored as {name}, but it "
                                             r"must be a float type \(F32, F16, BF16, F64\)"):
        load_model(write_model(tmp_path / "m", cfg, t))


def test_tensor_in_two_shards_is_refused(tmp_path):
    folder = _fixture(tmp_path, "llama_sharded")
    shards = sorted(folder.glob("model-*.safetensors"))
    first = load_file(str(shards[0]))
    second = load_file(str(shards[1]))
    name = next(iter(first))
    save_file({**second, name: first[name]}, str(shards[1]))
    with pytest.raises(ModelLoadError, match=rf"tensor {name} is in both {shards[0].name} and "
                                             rf"{shards[1].name}"):
        load_model(folder)


@pytest.mark.parametrize("key, where, value, dtype", [
    ("model.layers.0.self_attn.q_proj.weight", (3, 5), np.nan, np.float32),
    ("model.embed_tokens.weight", (49, 0), np.inf, np.float32),
    ("model.layers.1.post_attention_layernorm.weight", (7,), -np.inf, np.float16),
])
def test_non_finite_weight_refused_at_load_naming_the_tensor(tmp_path, key, where, value, dtype):
    cfg = llama_config()
    t = llama_tensors(cfg)
    t[key] = t[key].astype(dtype)
    t[key][where] = value
    with pytest.raises(ModelLoadError, match=re.escape(
            f"model.safetensors: tensor {key} holds 1 non-finite value (the first, {value} at "
            f"{list(where)}), expected finite numbers")):
        load_model(write_model(tmp_path / "m", cfg, t))


def test_bf16_nan_refused(tmp_path):
    cfg = llama_config()
    t = llama_tensors(cfg)
    key = "model.layers.0.mlp.down_proj.weight"
    bits = (t[key].view(np.uint32) >> 16).astype(np.uint16)
    bits[0, :4] = 0x7FC0  # bfloat16 NaN
    save = {k: v for k, v in t.items() if k != key}
    folder = write_model(tmp_path / "m", cfg, save)
    # safetensors' NumPy writer has no bfloat16: add the tensor to the header by hand
    import struct
    raw = (folder / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    header[key] = {"dtype": "BF16", "shape": list(bits.shape),
                   "data_offsets": [len(data), len(data) + bits.nbytes]}
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + data + bits.tobytes())
    with pytest.raises(ModelLoadError, match=rf"tensor {key} holds 4 non-finite values"):
        load_model(folder)


# ---- files that are not regular files, files that cannot be read ---------------------------------

def _in_thread(fn, timeout=60.0):
    """fn() in a daemon thread: (exception or result). A hang fails the test instead of the suite."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    return thread.is_alive(), box


def _unblock(fifo: Path) -> None:
    """Open the FIFO for writing and close it, so a reader stuck in open() sees end of file."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _refused_at_once(fn, fifo: Path, message: str):
    hung, box = _in_thread(fn)
    if hung:
        _unblock(fifo)
        pytest.fail(f"loading blocked on the FIFO {fifo}")
    assert isinstance(box.get("error"), ModelLoadError), box
    assert message in str(box["error"]), str(box["error"])


FIFO_IN_FOLDER = ["model.safetensors", "config.json", "tokenizer.json", "model.safetensors.index.json",
                  "model-00002-of-00003.safetensors"]


@pytest.mark.parametrize("name", FIFO_IN_FOLDER)
def test_fifo_in_a_model_folder_refused_before_it_is_opened(tmp_path, name):
    folder = _fixture(tmp_path, "llama_sharded") if "0000" in name or "index" in name else \
        _with_tokenizer(tmp_path)
    target = folder / name
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    _refused_at_once(lambda: load_model(folder), target,
                     f"{target} is a FIFO (named pipe), not a regular file")


def test_fifo_gguf_refused_before_it_is_opened(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    assert not is_gguf(fifo)  # never opened: it returns at once
    _refused_at_once(lambda: load_gguf(fifo), fifo, f"{fifo} is a FIFO (named pipe)")
    _refused_at_once(lambda: load_model(fifo), fifo, f"{fifo} is a FIFO (named pipe)")
    _refused_at_once(lambda: load_model(str(fifo)), fifo, "not a regular file")


def test_device_as_weights_refused(tmp_path):
    folder = tiny_llama(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("/dev/zero")  # endless: never to be read
    _refused_at_once(lambda: load_model(folder), folder / "model.safetensors", "is a character device")


@pytest.fixture
def unreadable(monkeypatch):
    """make(path): opening that path raises PermissionError, as for a chmod 000 file when not root
    (the tests run as root, which reads anything)."""
    blocked = set()
    real_open = io.open

    def guarded(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and Path(file).resolve() in blocked:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    monkeypatch.setattr(io, "open", guarded)
    return lambda path: blocked.add(Path(path).resolve())


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json"])
def test_unreadable_file_says_permission_denied(tmp_path, unreadable, name):
    folder = _with_tokenizer(tmp_path)
    unreadable(folder / name)
    with pytest.raises(ModelLoadError) as err:
        load_model(folder)
    text = str(err.value)
    assert text == f"cannot read {folder / name}: permission denied", text


def test_unreadable_index_and_gguf_say_permission_denied(tmp_path, unreadable, good_gguf):
    folder = _fixture(tmp_path, "llama_sharded")
    unreadable(folder / "model.safetensors.index.json")
    with pytest.raises(ModelLoadError, match="model.safetensors.index.json: permission denied"):
        load_model(folder)
    unreadable(good_gguf)
    with pytest.raises(ModelLoadError, match=r"good.gguf: permission denied"):
        load_gguf(good_gguf)


def test_unreadable_readme_is_no_reason_to_refuse(tmp_path, unreadable):
    folder = tiny_llama(tmp_path / "m")
    (folder / "README.md").write_text("license: mit\n")
    unreadable(folder / "README.md")
    assert load_model(folder).license is None


# ---- GGUF metadata -------------------------------------------------------------------------------

@pytest.fixture
def good_gguf(tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    return write_gguf(tmp_path / "good.gguf", cfg, tensors)


DELETE = object()


def _gguf_with(tmp_path, monkeypatch, overrides: dict, tensors_edit=None, qtype=Q.F32,
               tokenizer=False) -> Path:
    """A tiny GGUF (llama_gqa) with metadata keys replaced: key -> (value, type[, item type]), or
    DELETE. With tokenizer=True it carries a byte-level BPE vocabulary of 48 tokens."""

    class Overriding(gguf.GGUFWriter):
        def write_header_to_file(self, *args, **kwargs):
            from gguf.gguf_writer import GGUFValue
            for key, spec in overrides.items():
                if spec is DELETE:
                    self.kv_data[0].pop(key, None)
                else:
                    self.kv_data[0][key] = GGUFValue(*spec)
            return super().write_header_to_file(*args, **kwargs)

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    if tensors_edit:
        tensors_edit(tensors)
    extra = {}
    if tokenizer:
        extra = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2",
                 "tokenizer.ggml.tokens": [chr(ord("a") + i) if i < 26 else f"t{i}" for i in range(48)],
                 "tokenizer.ggml.token_type": [1] * 48}
    monkeypatch.setattr(gguf, "GGUFWriter", Overriding)
    return write_gguf(tmp_path / "bad.gguf", cfg, tensors, qtype, extra_kv=extra)


GGUF_CASES = [
    ({"llama.embedding_length": ("x", V.STRING)},
     "sets llama.embedding_length to 'x', but it must be a whole number (hidden size, d_model)"),
    ({"llama.context_length": ([1, 2], V.ARRAY, V.UINT32)}, "sets llama.context_length to [1, 2], but it must be"),
    ({"llama.attention.layer_norm_rms_epsilon": ("tiny", V.STRING)},
     "sets llama.attention.layer_norm_rms_epsilon to 'tiny', but it must be a positive finite number"),
    ({"llama.attention.layer_norm_rms_epsilon": (-1.0, V.FLOAT32)},
     "sets llama.attention.layer_norm_rms_epsilon to -1.0, but it must be a positive finite number"),
    ({"llama.rope.freq_base": ("x", V.STRING)}, "sets llama.rope.freq_base to 'x', but it must be a positive"),
    ({"llama.attention.head_count_kv": (3, V.UINT32)},
     "sets llama.attention.head_count_kv to 3, but it must be a divisor of llama.attention.head_count = 8"),
    ({"llama.attention.key_length": ("8", V.STRING)}, "sets llama.attention.key_length to '8', but it must be"),
    ({"llama.rope.dimension_count": ("8", V.STRING)}, "sets llama.rope.dimension_count to '8', but it must be"),
    ({"llama.attention.sliding_window": ("x", V.STRING)},
     "sets llama.attention.sliding_window to 'x', but it must be a whole number"),
    ({"llama.rope.scaling.type": (5, V.UINT32)}, "sets llama.rope.scaling.type to 5, but it must be a string"),
    ({"llama.block_count": DELETE}, "does not set llama.block_count, which must be a whole number"),
    ({"general.architecture": (5, V.UINT32)}, "sets general.architecture to 5, but it must be a string"),
]


@pytest.mark.parametrize("overrides, message", GGUF_CASES, ids=[m.split(" is ")[0] for _, m in GGUF_CASES])
def test_gguf_metadata_of_the_wrong_type_is_named(tmp_path, monkeypatch, overrides, message):
    path = _gguf_with(tmp_path, monkeypatch, overrides)
    with pytest.raises(ModelLoadError) as err:
        load_model(path)
    assert f"bad.gguf {message}" in str(err.value), str(err.value)


def test_gguf_tokenizer_builds_and_runs(tmp_path, monkeypatch):
    model = load_model(_gguf_with(tmp_path, monkeypatch, {}, tokenizer=True))
    assert model.tokenizer is not None and model.notice is None
    assert model.run("abc").input_ids.tolist() == [0, 1, 2]


GGUF_TOKENIZER_CASES = [
    ({"tokenizer.ggml.token_type": ([1] * 40, V.ARRAY, V.INT32)},
     "gives tokenizer.ggml.token_type 40 entries, but it must give one per token of tokenizer.ggml.tokens (48)"),
    ({"tokenizer.ggml.scores": ([0.0] * 47, V.ARRAY, V.FLOAT32)}, "gives tokenizer.ggml.scores 47 entries"),
    ({"tokenizer.ggml.tokens": (list(range(48)), V.ARRAY, V.UINT32)},
     "sets tokenizer.ggml.tokens to [0, 1, 2, "),
    ({"tokenizer.ggml.tokens": ([f"x{i}" for i in range(60)], V.ARRAY, V.STRING),
      "tokenizer.ggml.token_type": ([1] * 60, V.ARRAY, V.INT32)},
     "has 60 tokens in tokenizer.ggml.tokens, but its embedding token_embd.weight has 48 rows"),
    ({"tokenizer.ggml.token_type": (["n"] * 48, V.ARRAY, V.STRING)},
     "sets tokenizer.ggml.token_type to ['n', "),
    ({"tokenizer.ggml.model": (5, V.UINT32)}, "sets tokenizer.ggml.model to 5, but it must be a string"),
    ({"tokenizer.ggml.add_bos_token": (True, V.BOOL), "tokenizer.ggml.bos_token_id": (99, V.UINT32)},
     "sets tokenizer.ggml.bos_token_id to 99, but it must be a token id in 0..47"),
    ({"tokenizer.ggml.bos_token_id": ("0", V.STRING)}, "sets tokenizer.ggml.bos_token_id to '0', but it must be"),
    ({"tokenizer.ggml.merges": (["zz qq"], V.ARRAY, V.STRING)}, "gives tokenizer.ggml.merges that cannot be used with its tokenizer.ggml.tokens"),
]


@pytest.mark.parametrize("overrides, message", GGUF_TOKENIZER_CASES,
                         ids=[m.split(" ")[0] + str(i) for i, (_, m) in enumerate(GGUF_TOKENIZER_CASES)])
def test_gguf_tokenizer_arrays_checked(tmp_path, monkeypatch, overrides, message):
    path = _gguf_with(tmp_path, monkeypatch, overrides, tokenizer=True)
    with pytest.raises(ModelLoadError) as err:
        load_model(path)
    assert f"bad.gguf {message}" in str(err.value), str(err.value)


def test_gguf_non_finite_tensor_refused_naming_it(tmp_path, monkeypatch):
    def poison(tensors):
        tensors["blk.1.attn_k.weight"][2, 3] = np.nan

    path = _gguf_with(tmp_path, monkeypatch, {}, poison)
    with pytest.raises(ModelLoadError, match=r"bad.gguf: tensor blk.1.attn_k.weight holds 1 "
                                             r"non-finite value"):
        load_model(path)


def test_gguf_float32_embedding_scanned_at_load(tmp_path, monkeypatch):
    def poison(tensors):
        tensors["token_embd.weight"][5, 0] = np.inf

    with pytest.raises(ModelLoadError, match=r"tensor token_embd.weight holds 1 non-finite value "
                                             r"\(the first, inf at \[5, 0\]\)"):
        load_model(_gguf_with(tmp_path, monkeypatch, {}, poison))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # gguf.quants quantising a NaN row
def test_gguf_quantised_embedding_row_checked_when_used(tmp_path, monkeypatch):
    """The kept-quantised token embedding is not dequantised at load: a NaN row is named when a run
    needs it, and the other rows still run."""
    def poison(tensors):
        tensors["token_embd.weight"][7] = np.nan

    model = load_model(_gguf_with(tmp_path, monkeypatch, {}, poison, qtype=Q.Q8_0))
    assert np.isfinite(model.run(ids=[1, 2, 3]).attentions).all()
    for ids in ([1, 2, 3, 7], [1, 7, 3]):  # (the cached run's one new row, then a run of several)
        with pytest.raises(ModelLoadError, match=r"tensor token_embd.weight row 7 \(token id 7\) holds "
                                                 "non-finite values"):
            model.run(ids=ids)


def test_oversized_json_refused_unread(tmp_path):
    folder = tiny_llama(tmp_path / "m")
    with open(folder / "config.json", "r+b") as fh:
        fh.truncate(17 << 20)  # sparse: 17 MiB of nothing
    with pytest.raises(ModelLoadError, match=r"config.json is 17,825,792 bytes, expected at most "
                                             r"16,777,216 for a config.json"):
        load_model(folder)
