"""A model whose files disagree is refused in one line that names the file and the value at fault
and says what to do: a config.json or GGUF header that counts more layers than the weights hold,
a vocabulary that is not the token embedding's, a tensor of another shape."""

import json
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

from gguf_files import gguf_tensors, write_gguf
from tiny import FIXTURES, tiny_text_model

TEXT = "the cat sat"


def _edit_config(folder, **values):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(values)
    (folder / "config.json").write_text(json.dumps(cfg))


def _edit_tensors(folder, edit):
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    save_file(edit(tensors), str(path))


def test_a_config_with_more_layers_than_its_weights_names_both_and_the_count(tmp_path, cli):
    folder = tiny_text_model(tmp_path / "four")
    _edit_config(folder, num_hidden_layers=4)  # the weights hold layers 0 and 1
    rc, _, err = cli("heads", "--model", str(folder), "--text", TEXT)
    assert rc == 2
    assert (f"{folder / 'config.json'} sets num_hidden_layers to 4, but model.safetensors holds only "
            "layers 0..1: set num_hidden_layers to 2 if the model has 2 layers, or add the missing "
            "layers' weights") in err, err


def test_weights_missing_their_last_layer_are_counted_not_named_by_a_tensor(tmp_path, cli):
    folder = tiny_text_model(tmp_path / "cut")
    _edit_tensors(folder, lambda t: {k: v for k, v in t.items() if ".layers.1." not in k})
    rc, _, err = cli("attention", "--model", str(folder), "--text", TEXT, "--out", str(tmp_path / "a.npz"))
    assert rc == 2
    assert (f"{folder / 'config.json'} sets num_hidden_layers to 2, but model.safetensors holds only "
            "layer 0: set num_hidden_layers to 1 if the model has 1 layer") in err, err


def test_a_layer_missing_one_tensor_names_the_file_that_lacks_it(tmp_path, cli):
    folder = tiny_text_model(tmp_path / "holed")
    gone = "model.layers.1.self_attn.k_proj.weight"
    _edit_tensors(folder, lambda t: {k: v for k, v in t.items() if k != gone})
    rc, _, err = cli("heads", "--model", str(folder), "--text", TEXT)
    assert rc == 2 and f"model.safetensors has no tensor '{gone}'" in err, err
    assert "checkpoint has no tensor" not in err


def test_a_gguf_whose_block_count_is_over_its_layers_is_named(tmp_path, cli):
    cfg, tensors = gguf_tensors(tiny_text_model(tmp_path / "m"))
    path = write_gguf(tmp_path / "five.gguf", dict(cfg, num_hidden_layers=5), tensors)
    rc, _, err = cli("attention", "--model", str(path), "--ids", "1,2,3", "--out", str(tmp_path / "a.npz"))
    assert rc == 2
    assert ("five.gguf sets llama.block_count to 5, but it holds only layers 0..1: the file is "
            "incomplete or was written wrong; download or convert it again") in err, err


def test_a_vocab_size_that_is_not_the_embeddings_names_the_config_and_the_rows(tmp_path, cli):
    folder = tiny_text_model(tmp_path / "vocab")  # 259 tokens, 259 embedding rows
    _edit_config(folder, vocab_size=300)
    rc, _, err = cli("predict", "--model", str(folder), "--text", TEXT)
    assert rc == 2
    assert (f"{folder / 'config.json'} sets vocab_size to 300, but the token embedding "
            "model.embed_tokens.weight in model.safetensors has 259 rows: set vocab_size to 259 if "
            "these weights are the model's") in err, err


def test_a_gguf_vocab_size_that_is_not_the_embeddings_names_the_file(tmp_path, cli):
    cfg, tensors = gguf_tensors(tiny_text_model(tmp_path / "m"))
    path = write_gguf(tmp_path / "vocab.gguf", dict(cfg, vocab_size=400), tensors)
    rc, _, err = cli("heads", "--model", str(path), "--text", "1, 2, 3")
    assert rc == 2
    assert ("vocab.gguf sets llama.vocab_size to 400, but its token embedding token_embd.weight has "
            "259 rows") in err, err


def test_a_tensor_of_another_shape_names_its_file_and_the_config(tmp_path, cli):
    folder = tiny_text_model(tmp_path / "shape")
    name = "model.layers.0.self_attn.q_proj.weight"
    _edit_tensors(folder, lambda t: {**t, name: np.ascontiguousarray(t[name][:, :16])})
    rc, _, err = cli("heads", "--model", str(folder), "--text", TEXT)
    assert rc == 2
    assert (f"tensor {name} in model.safetensors has shape [32, 16], but {folder / 'config.json'} "
            "implies [32, 32]: give the config.json these weights were saved with") in err, err


def test_text_given_to_a_gguf_without_a_tokenizer_says_the_file_has_none(tmp_path, cli):
    cfg, tensors = gguf_tensors(tiny_text_model(tmp_path / "m"))
    path = write_gguf(tmp_path / "bare.gguf", cfg, tensors)
    rc, _, err = cli("heads", "--model", str(path), "--text", TEXT)
    assert rc == 2
    assert "this GGUF holds no tokenizer (it sets no tokenizer.ggml.model): type token ids" in err, err
    assert "tokenizer.json" not in err


def test_an_empty_file_is_said_to_be_empty(tmp_path, cli):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    rc, _, err = cli("heads", "--model", str(empty), "--text", TEXT)
    assert rc == 2 and "empty.gguf is empty (0 bytes), not a GGUF model; download or convert it again" in err, err
    rc, _, err = cli("calc", "--config", str(empty))
    assert rc == 2 and "empty.gguf is empty (0 bytes)" in err and "JSON" not in err, err
    folder = tiny_text_model(tmp_path / "m")
    (folder / "model.safetensors").write_bytes(b"")
    rc, _, err = cli("heads", "--model", str(folder), "--text", TEXT)
    assert rc == 2 and "model.safetensors is empty (0 bytes), not safetensors weights" in err, err
    (folder / "config.json").write_text("")
    rc, _, err = cli("heads", "--model", str(folder), "--text", TEXT)
    assert rc == 2 and f"{folder / 'config.json'} is empty, expected a JSON object {{...}}" in err, err


def test_a_gguf_of_an_architecture_attnviz_cannot_open_names_the_file(tmp_path, cli):
    cfg, tensors = gguf_tensors(tiny_text_model(tmp_path / "m"))
    path = write_gguf(tmp_path / "other.gguf", cfg, tensors, arch="mamba")
    rc, _, err = cli("heads", "--model", str(path), "--text", TEXT)
    assert rc == 2
    assert "other.gguf holds a 'mamba' model (general.architecture), which attnviz cannot open yet (it " \
           "opens gemma3, llama" in err, err


def test_quantize_refuses_a_folder_whose_config_counts_more_layers_than_its_weights(tmp_path, cli):
    folder = tiny_text_model(tmp_path / "four")
    _edit_config(folder, num_hidden_layers=4)
    out = tmp_path / "q.gguf"
    rc, _, err = cli("quantize", "--model", str(folder), "--type", "Q8_0", "--out", str(out))
    assert rc == 2 and not out.exists()
    assert f"{folder / 'config.json'} sets num_hidden_layers to 4, but model.safetensors holds only " \
           "layers 0..1" in err, err


def test_a_multimodal_gemma3_config_is_named_by_its_nested_key(tmp_path, cli):
    folder = tmp_path / "gemma3"
    shutil.copytree(FIXTURES / "gemma3", folder)
    text = json.loads((folder / "config.json").read_text())
    text.pop("layer_types")
    text["num_hidden_layers"] += 2
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    rc, _, err = cli("attention", "--model", str(folder), "--ids", "1,2,3", "--out", str(tmp_path / "a.npz"))
    assert rc == 2
    assert (f"{folder / 'config.json'} sets text_config.num_hidden_layers to 9, but model.safetensors "
            "holds only layers 0..6: set text_config.num_hidden_layers to 7") in err, err


def test_a_multimodal_gemma3_config_that_leaves_a_key_out_says_so_with_the_default(tmp_path, cli):
    """A real multimodal config's text_config gives only a few keys: the one left out is not
    said to be set, its default is named."""
    folder = tmp_path / "gemma3"
    shutil.copytree(FIXTURES / "gemma3", folder)
    text = json.loads((folder / "config.json").read_text())
    text.pop("vocab_size")
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    rc, _, err = cli("attention", "--model", str(folder), "--ids", "1,2,3", "--out", str(tmp_path / "a.npz"))
    assert rc == 2
    assert (f"{folder / 'config.json'} does not set text_config.vocab_size (default 262,208), but the "
            "token embedding model.embed_tokens.weight in model.safetensors has 64 rows: set "
            "text_config.vocab_size to 64 if these weights are the model's") in err, err
