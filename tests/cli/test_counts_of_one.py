"""A count of one reads in the singular wherever a count comes before its noun: `attnviz compare` on
a model of one head, the Calculator's lines for one head, one window layer and a one-token window,
a long view's cell of one weight, one byte."""

import numpy as np
from safetensors.numpy import load_file, save_file
from tiny import tiny_llama

from attnviz.engine.calc import calculate, format_bytes
from attnviz.engine.calc.inputs import MLA
from attnviz.figures.view import Overview

IDS = "3,1,4,1,5,9,2,6"


def test_compare_of_one_head_models_names_the_head_that_moved_most(cli, tmp_path):
    a = tiny_llama(tmp_path / "a", n_layer=1, n_head=1, n_kv_head=1, d_model=16)
    b = tmp_path / "b"
    b.mkdir()
    (b / "config.json").write_text((a / "config.json").read_text())
    rng = np.random.default_rng(1)
    save_file({k: v + (rng.standard_normal(v.shape) * 0.05).astype(v.dtype)
               for k, v in load_file(a / "model.safetensors").items()}, b / "model.safetensors")
    rc, out, err = cli("compare", "--model", str(a), "--against", str(b), "--ids", IDS)
    assert rc == 0, err
    assert "; the 1 head that moved most (mean over query rows, largest row):" in out, out


def test_the_calculators_lines_for_one_head_one_window_layer_and_a_one_token_window():
    one = calculate(d_model=64, n_head=1, n_layer=2, vocab_size=100, seq_len=8, sliding_window=1,
                    sliding_window_layers=(1,))
    assert "1 of 2 layers keeps only the last 1 token" in one.warnings, one.warnings
    latent = calculate(d_model=64, n_head=1, n_layer=2, vocab_size=100, seq_len=8,
                       mla=MLA(kv_lora_rank=16, qk_rope_head_dim=8))
    assert latent.formulas["group_size"] == "none: its 1 query head reads one shared latent (no KV heads to group)"
    assert format_bytes(1) == "1 byte" and format_bytes(2) == "2 bytes"


def test_a_long_views_cell_says_how_many_tokens_it_holds():
    exact = Overview(0, (0,), (0, 4, 0, 4), "max", np.zeros((1, 4, 4), np.float32))
    pooled = Overview(0, (0,), (0, 4, 0, 6), "max", np.zeros((1, 2, 2), np.float32))
    assert exact.block_text() == "1×1 token" and pooled.block_text() == "2×3 tokens"
