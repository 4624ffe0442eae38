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
    ("llama", _set(rms_norm_eps="x"), "rms_norm_eps is 'x', expected a positive finite number"),
    ("llama", _set(rms_norm_eps=-1), "rms_norm_eps is -1, expected a positive finite number"),
    ("llama", _set(rms_norm_eps=0), "rms_norm_eps is 0, expected a positive finite number"),
    ("llama", _set(hidden_act="gelu_foo"), "hidden_act is 'gelu_foo', expected one of gelu, "),
    ("llama", _set(hidden_act=None, model_type="llama"), None),  # null: the default, silu
    ("llama", _set(rope_parameters="x"), "rope_parameters is 'x', expected an object"),
    ("llama", _set(rope_scaling=[1, 2]), "rope_scaling is [1, 2], expected an object"),
    ("llama", _set(rope_parameters={"rope_type": 5}), "rope_parameters.rope_type is 5, expected a string"),
    ("llama", _set(rope_parameters={"rope_type": "dynamic"}), "rope_parameters.rope_type 'dynamic' is not supported"),
    ("llama", _set(rope_parameters={"rope_theta": "big"}),
     "rope_parameters.rope_theta is 'big', expected a positive finite number"),
    ("llama", _set(rope_theta=-1.0), "rope_theta is -1.0, expected a positive finite number"),
    ("llama", _set(num_key_value_heads=3), "num_key_value_heads is 3, expected a divisor of "
                                           "num_attention_heads = 8"),
    ("llama", _set(num_key_value_heads=16), "num_key_value_heads is 16, expected a divisor of "
                                            "num_attention_heads = 8"),
    ("llama", _set(num_attention_heads=5), "hidden_size is 32, expected a multiple of "
                                           "num_attention_heads = 5"),
    ("llama", _set(head_dim=5), "head_dim is 5, expected an even head width"),
    ("llama", _set(head_dim="4"), "head_dim is '4', expected a whole number"),
    ("llama", _set(max_position_embeddings=0), "max_position_embeddings is 0, expected a whole "
                                               "number (positions) in 1.."),
    ("llama", _set(max_position_embeddings=-5), "max_position_embeddings is -5, expected"),
    ("llama", _set(vocab_size="many"), "vocab_size is 'many', expected a whole number"),
    ("llama", _set(hidden_size=32.0), "hidden_size is 32.0, expected a whole number (hidden size"),
    ("llama", _set(num_hidden_layers=True), "num_hidden_layers is true, expected a whole number"),
    ("llama", _set(num_hidden_layers=10**9), "num_hidden_layers is 1000000000, expected a whole "
                                             "number (layers, n_layer) in 1..1,024"),
    ("llama", _drop("hidden_size"), "hidden_size is missing, expected a whole number"),
    ("llama", _set(intermediate_size=None), "intermediate_size is null, expected a whole number"),
    ("llama", _set(attention_bias="false"), "attention_bias is 'false', expected true or false"),
    ("llama", _set(mlp_bias=1), "mlp_bias is 1, expected true or false"),
    ("llama", _set(partial_rotary_factor="half"), "partial_rotary_factor is 'half', expected a number"),
    ("llama", _set(model_type=["llama"]), "model_type ['llama'] is not supported"),
    ("llama", _set(model_type="mamba"), "model_type 'mamba' is not supported"),
    ("mistral", _set(sliding_window="x"), "sliding_window is 'x', expected a whole number"),
    ("mistral", _set(sliding_window=-3), "sliding_window is -3, expected a whole number"),
    ("bert", _set(hidden_act="swiglu"), "hidden_act is 'swiglu', expected one of"),
    ("bert", _set(layer_norm_eps="1e-12"), "layer_norm_eps is '1e-12', expected a positive finite"),
    ("bert", _set(head_dim=10), "head_dim is 10, expected hidden_size / num_attention_heads = 48 / 4"),
    ("bert", _set(type_vocab_size="2"), "type_vocab_size is '2', expected a whole number"),
    ("bert", _set(position_embedding_type="relative_key"), "position_embedding_type 'relative_key' "
                                                          "is not supported"),
    ("gpt2", _set(activation_function="gelu_foo"), "activation_function is 'gelu_foo', expected one of"),
    ("gpt2", _set(layer_norm_epsilon=float("nan")), "layer_norm_epsilon is nan, expected a positive"),
    ("gpt2", _set(n_embd=50), "n_embd is 50, expected a multiple of n_head = 4"),
    ("gpt2", _set(scale_attn_by_inverse_layer_idx="no"),
     "scale_attn_by_inverse_layer_idx is 'no', expected true or false"),
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
    with pytest.raises(ModelLoadError, match="hidden_act is 'quick_gelu'"):
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
    with pytest.raises(ModelLoadError, match=r"^x\.gguf: llama\.attention\.layer_norm_rms_epsilon is "
                                             r"'e', expected a positive finite number$"):
        config_from_dict(llama_config(rms_norm_eps="e"), source="x.gguf", names=names)
    with pytest.raises(ModelLoadError, match="config.json holds a list"):
        config_from_dict([])


# ---- model.safetensors.index.json -----------------------------------------------------------------

INDEX_CASES = [
    (lambda d: d.update(weight_map=list(d["weight_map"])), "weight_map is a list, expected an object"),
    (lambda d: d["weight_map"].update({"model.norm.weight": 3}),
     "weight_map['model.norm.weight'] is 3, expected the name of a shard file"),
    (lambda d: d["weight_map"].update({"model.norm.weight": "../elsewhere.safetensors"}),
     "is '../elsewhere.safetensors', expected the name of a shard file in the same folder"),
    (lambda d: d.pop("weight_map"), "weight_map is missing"),
    (lambda d: d.update(weight_map={}), "weight_map is empty"),
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
    (None, 60, "model.vocab gives token 'w59' id 59, but the model's embedding has 50 rows "
               "(config.json vocab_size): expected ids 0..49"),
    (lambda s: s["model"]["vocab"].update(w9=50), None, "model.vocab gives token 'w9' id 50"),
    (lambda s: s["model"]["vocab"].update(w9="9"), None, "model.vocab['w9'] is '9', expected a token id"),
    (lambda s: s["model"]["vocab"].update(w9=-1), None, "model.vocab['w9'] is -1, expected a token id"),
    (lambda s: s["added_tokens"][0].update(id=99), None, "added_tokens[0] gives token '<s>' id 99"),
    (lambda s: s["added_tokens"][0].update(id="0"), None, "added_tokens[0].id is '0', expected a token id"),
    (lambda s: s["post_processor"]["special_tokens"]["<s>"].update(ids=[77]), None,
     "post_processor.special_tokens['<s>'].ids gives token '<s>' id 77"),
    (lambda s: s["post_processor"]["special_tokens"]["<s>"].update(ids="0"), None,
     "post_processor.special_tokens['<s>'].ids is '0', expected a list of token ids"),
    (lambda s: s.update(model=[1]), None, "model is [1], expected an object with a vocab"),
    (lambda s: s["model"].update(vocab="x"), None, "model.vocab is a string, expected an object"),
    (lambda s: s.update(added_tokens={}), None, "added_tokens is an object, expected a list"),
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
    with pytest.raises(ModelLoadError, match=rf"tensor {key} is stored as {name}, expected a float "
                                             r"type \(F32, F16, BF16, F64\)"):
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
     "llama.embedding_length is 'x', expected a whole number (hidden size, d_model)"),
    ({"llama.context_length": ([1, 2], V.ARRAY, V.UINT32)}, "llama.context_length is [1, 2], expected"),
    ({"llama.attention.layer_norm_rms_epsilon": ("tiny", V.STRING)},
     "llama.attention.layer_norm_rms_epsilon is 'tiny', expected a positive finite number"),
    ({"llama.attention.layer_norm_rms_epsilon": (-1.0, V.FLOAT32)},
     "llama.attention.layer_norm_rms_epsilon is -1.0, expected a positive finite number"),
    ({"llama.rope.freq_base": ("x", V.STRING)}, "llama.rope.freq_base is 'x', expected a positive"),
    ({"llama.attention.head_count_kv": (3, V.UINT32)},
     "llama.attention.head_count_kv is 3, expected a divisor of llama.attention.head_count = 8"),
    ({"llama.attention.key_length": ("8", V.STRING)}, "llama.attention.key_length is '8', expected"),
    ({"llama.rope.dimension_count": ("8", V.STRING)}, "llama.rope.dimension_count is '8', expected"),
    ({"llama.attention.sliding_window": ("x", V.STRING)},
     "llama.attention.sliding_window is 'x', expected a whole number"),
    ({"llama.rope.scaling.type": (5, V.UINT32)}, "llama.rope.scaling.type is 5, expected a string"),
    ({"llama.block_count": DELETE}, "llama.block_count is missing, expected a whole number"),
    ({"general.architecture": (5, V.UINT32)}, "general.architecture is 5, expected a string"),
]


@pytest.mark.parametrize("overrides, message", GGUF_CASES, ids=[m.split(" is ")[0] for _, m in GGUF_CASES])
def test_gguf_metadata_of_the_wrong_type_is_named(tmp_path, monkeypatch, overrides, message):
    path = _gguf_with(tmp_path, monkeypatch, overrides)
    with pytest.raises(ModelLoadError) as err:
        load_model(path)
    assert f"bad.gguf: {message}" in str(err.value), str(err.value)


def test_gguf_tokenizer_builds_and_runs(tmp_path, monkeypatch):
    model = load_model(_gguf_with(tmp_path, monkeypatch, {}, tokenizer=True))
    assert model.tokenizer is not None and model.notice is None
    assert model.run("abc").input_ids.tolist() == [0, 1, 2]


GGUF_TOKENIZER_CASES = [
    ({"tokenizer.ggml.token_type": ([1] * 40, V.ARRAY, V.INT32)},
     "tokenizer.ggml.token_type has 40 entries, expected one per token of tokenizer.ggml.tokens (48)"),
    ({"tokenizer.ggml.scores": ([0.0] * 47, V.ARRAY, V.FLOAT32)}, "tokenizer.ggml.scores has 47 entries"),
    ({"tokenizer.ggml.tokens": (list(range(48)), V.ARRAY, V.UINT32)},
     "tokenizer.ggml.tokens is [0, 1, 2, "),
    ({"tokenizer.ggml.tokens": ([f"x{i}" for i in range(60)], V.ARRAY, V.STRING),
      "tokenizer.ggml.token_type": ([1] * 60, V.ARRAY, V.INT32)},
     "tokenizer.ggml.tokens has 60 tokens, but the embedding token_embd.weight has 48 rows"),
    ({"tokenizer.ggml.token_type": (["n"] * 48, V.ARRAY, V.STRING)},
     "tokenizer.ggml.token_type is ['n', "),
    ({"tokenizer.ggml.model": (5, V.UINT32)}, "tokenizer.ggml.model is 5, expected a string"),
    ({"tokenizer.ggml.add_bos_token": (True, V.BOOL), "tokenizer.ggml.bos_token_id": (99, V.UINT32)},
     "tokenizer.ggml.bos_token_id is 99, expected a token id in 0..47"),
    ({"tokenizer.ggml.bos_token_id": ("0", V.STRING)}, "tokenizer.ggml.bos_token_id is '0', expected"),
    ({"tokenizer.ggml.merges": (["zz qq"], V.ARRAY, V.STRING)}, "tokenizer.ggml.merges cannot be used"),
]


@pytest.mark.parametrize("overrides, message", GGUF_TOKENIZER_CASES,
                         ids=[m.split(" ")[0] + str(i) for i, (_, m) in enumerate(GGUF_TOKENIZER_CASES)])
def test_gguf_tokenizer_arrays_checked(tmp_path, monkeypatch, overrides, message):
    path = _gguf_with(tmp_path, monkeypatch, overrides, tokenizer=True)
    with pytest.raises(ModelLoadError) as err:
        load_model(path)
    assert f"bad.gguf: {message}" in str(err.value), str(err.value)


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
