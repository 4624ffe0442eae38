"""Weights that hold more layers than config.json or a GGUF's block_count counts load as the count
says (as Transformers loads them, leaving the rest unread), and the model's notice says so."""

import json
import subprocess
import sys

from gguf_files import gguf_tensors, write_gguf
from tiny import tiny_text_model

from attnviz.engine.computing.load import load_folder, load_gguf


def _one_layer_config(folder):
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=1)))  # weights: 2
    return folder


def test_a_config_counting_fewer_layers_than_its_weights_says_which_are_read(tmp_path):
    model = load_folder(_one_layer_config(tiny_text_model(tmp_path / "m")))
    assert model.config.n_layer == 1
    assert model.notice == ("config.json sets num_hidden_layers to 1; model.safetensors holds 2 layers: "
                            "only layer 0 is read")


def test_a_gguf_block_count_below_its_blocks_says_which_are_read(tmp_path):
    cfg, tensors = gguf_tensors(tiny_text_model(tmp_path / "m"))
    model = load_gguf(write_gguf(tmp_path / "one.gguf", dict(cfg, num_hidden_layers=1), tensors))
    assert model.config.n_layer == 1
    assert model.notice == ("one.gguf sets llama.block_count to 1; it holds 2 layers: only layer 0 is read; "
                            "this GGUF holds no tokenizer (it sets no tokenizer.ggml.model): type token ids "
                            "instead, e.g. 5, 17, 3")  # (both of its notices, in one line)


def test_weights_holding_as_many_layers_as_counted_give_no_notice(tmp_path):
    assert load_folder(tiny_text_model(tmp_path / "m")).notice is None


def test_the_command_line_says_it_once_on_stderr(tmp_path):
    folder = _one_layer_config(tiny_text_model(tmp_path / "m"))
    proc = subprocess.run([sys.executable, "-m", "attnviz", "heads", "--model", str(folder), "--text", "the cat"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = "config.json sets num_hidden_layers to 1; model.safetensors holds 2 layers: only layer 0 is read"
    assert proc.stderr.count(line) == 1, proc.stderr
