"""`attnviz patch`: the JSON interface keys and the engine's numbers, the table of largest effects,
and one-line refusals for every kind of bad input."""

import json

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import patching as PT
from gguf_files import spm_model
from tiny import FIXTURES, tiny_text_model

GPT2 = str(FIXTURES / "gpt2")
CLEAN, CORRUPT = "3,1,4,1,5,9,2", "3,1,4,7,5,9,2"
KEYS = ("tokens_clean", "tokens_corrupt", "position", "target", "alt", "diff_clean", "diff_corrupt",
        "direction", "what", "effect")


@pytest.fixture(scope="module")
def text_model(tmp_path_factory):
    folder = tiny_text_model(tmp_path_factory.mktemp("patch") / "tiny")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["tie_word_embeddings"] = True  # an LM head: the token embedding
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


@pytest.mark.parametrize("what", PT.WHATS)
def test_json_has_the_interface_keys_and_the_engines_numbers(cli, what):
    rc, out, _ = cli("patch", "--model", GPT2, "--ids-clean", CLEAN, "--ids-corrupt", CORRUPT,
                     "--what", what, "--json")
    assert rc == 0
    doc = json.loads(out)
    assert set(KEYS) <= set(doc)
    model = load_model(GPT2)
    want = PT.patch(model, [3, 1, 4, 1, 5, 9, 2], [3, 1, 4, 7, 5, 9, 2], what)
    assert (doc["what"], doc["direction"], doc["position"]) == (what, "denoise", 6)
    assert (doc["target"], doc["alt"]) == (want.metric.target, want.metric.alt)
    assert doc["diff_clean"] == want.metric.diff_clean and doc["diff_corrupt"] == want.metric.diff_corrupt
    assert np.shape(doc["effect"]) == want.effect.shape
    np.testing.assert_allclose(doc["effect"], want.effect, atol=1e-9)
    assert len(doc["tokens_clean"]) == len(doc["tokens_corrupt"]) == 7


def test_options_reach_the_engine(cli):
    rc, out, _ = cli("patch", "--model", GPT2, "--ids-clean", CLEAN, "--ids-corrupt", CORRUPT,
                     "--what", "resid", "--position", "-2", "--target", "#7", "--alt", "#9",
                     "--direction", "noise", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert (doc["position"], doc["target"], doc["alt"], doc["direction"]) == (5, 7, 9, "noise")
    want = PT.patch(load_model(GPT2), [3, 1, 4, 1, 5, 9, 2], [3, 1, 4, 7, 5, 9, 2], "resid", 5, 7, 9,
                    "noise")
    np.testing.assert_allclose(doc["effect"], want.effect, atol=1e-9)
    assert doc["effect"][0][6] == 1.0  # after the position: cannot reach it, the clean diff stays


def test_texts_and_the_table_of_largest_effects(cli, text_model):
    rc, out, _ = cli("patch", "--model", text_model, "--clean", "the cat sat",
                     "--corrupt", "the dog sat", "--what", "resid")
    assert rc == 0
    lines = out.splitlines()
    assert "resid, denoise" in lines[0] and "clean" in lines[1] and "corrupted" in lines[1]
    rows = lines[3:]
    assert len(rows) == 10
    assert "L0 at 3 'c'/'d'" in out  # the swapped position, both tokens
    sizes = [abs(float(r.split()[-1])) for r in rows]
    assert sizes == sorted(sizes, reverse=True)
    rc, out, _ = cli("patch", "--model", text_model, "--clean", "the cat sat",
                     "--corrupt", "the dog sat", "--what", "head_out_by_pos", "--json")
    doc = json.loads(out)
    assert doc["tokens_clean"][3] == "c" and doc["tokens_corrupt"][3] == "d"
    assert np.shape(doc["effect"]) == (2, 10, 8)


def test_the_noise_table_lists_the_largest_changes_from_1(cli, text_model):
    rc, out, _ = cli("patch", "--model", text_model, "--clean", "the cat sat",
                     "--corrupt", "the dog sat", "--what", "resid", "--direction", "noise")
    assert rc == 0
    lines = out.splitlines()
    assert "1 where nothing changes; largest |effect - 1|:" in lines[2]
    changes = [abs(float(r.split()[-1]) - 1) for r in lines[3:]]
    assert changes == sorted(changes, reverse=True) and changes[0] > 0.5
    assert "L0 at 3 'c'/'d'" in out  # the swapped position: the corrupted answer in whole


@pytest.mark.parametrize("argv, message", [
    (["--ids-clean", CLEAN, "--ids-corrupt", "3,1,4"],
     "the clean text is 7 tokens and the corrupted text 3: patching needs texts of one length"),
    (["--ids-clean", CLEAN, "--ids-corrupt", CORRUPT, "--position", "7"],
     "position 7 is outside the 7 tokens"),
    (["--ids-clean", CLEAN, "--ids-corrupt", CORRUPT, "--target", "#64"],
     "token id 64 is outside the vocabulary 0..63"),
    (["--ids-clean", CLEAN, "--ids-corrupt", CLEAN],  # (before the diffs: their spread of 0 is not the fault)
     "error: the clean and corrupted texts are the same 7 tokens: patching needs a corrupted text that differs"),
    (["--ids-clean", CLEAN, "--ids-corrupt", "3,1,x"], "--ids-corrupt '3,1,x': 'x' at position 2"),
    (["--ids-clean", CLEAN, "--ids-corrupt", CORRUPT, "--target", "#5", "--alt", "#5"], "same token"),
    (["--ids-clean", CLEAN, "--ids-corrupt", CORRUPT, "--target", "7"],  # (a number alone is text)
     "gpt2 has no tokenizer: give the token as an id, #id"),
    (["--ids-clean", CLEAN, "--ids-corrupt", CORRUPT, "--position", "2"],  # (not float32 rounding)
     "error: the clean and corrupted texts first differ at token 3 '1'/'7', after position 2: under the "
     "causal mask position 2 sees no later token, so both runs are the same there and no patch can move "
     "the diff; pick a position from 3 to 6$"),
])
def test_bad_input_gets_one_line(cli, argv, message):
    rc, out, err = cli("patch", "--model", GPT2, "--what", "resid", *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert __import__("re").search(message, err), err


def test_text_refusals_name_the_text(cli, text_model):
    rc, _, err = cli("patch", "--model", text_model, "--clean", "", "--corrupt", "x",
                     "--what", "resid")
    assert rc == 2 and "the clean text: nothing to run" in err and len(err.strip().splitlines()) == 1
    rc, _, err = cli("patch", "--model", text_model, "--clean", "the cat sat",
                     "--corrupt", "the dog", "--what", "resid", "--target", "cat")
    assert rc == 2 and "10 tokens and the corrupted text 6" in err
    rc, _, err = cli("patch", "--model", text_model, "--clean", "the cat sat",
                     "--corrupt", "the dog sat", "--what", "resid", "--target", "zebra")
    assert rc == 2 and "'zebra' is 5 tokens" in err


def test_an_encoder_is_refused_saying_patching_needs_a_prediction(cli):
    rc, _, err = cli("patch", "--model", str(FIXTURES / "bert"), "--ids-clean", CLEAN,
                     "--ids-corrupt", CORRUPT, "--what", "resid")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "bert is an encoder" in err and "`attnviz patch` needs a causal language model, such as --model" in err


def test_the_what_is_required_and_checked(cli):
    with pytest.raises(SystemExit) as exc:
        cli("patch", "--model", GPT2, "--ids-clean", CLEAN, "--ids-corrupt", CORRUPT,
            "--what", "everything")
    assert exc.value.code == 2


def test_the_table_writes_a_rounding_zero_without_a_minus(cli, monkeypatch):
    """A corrupted diff and effects that are 0 up to float rounding (-2e-7) read +0.000."""
    from dataclasses import replace

    real = PT.patch

    def tiny(*args, **kw):
        r = real(*args, **kw)
        return replace(r, metric=replace(r.metric, diff_corrupt=-2e-7),
                       effect=np.full_like(r.effect, -2e-7))

    monkeypatch.setattr(PT, "patch", tiny)
    rc, out, _ = cli("patch", "--model", GPT2, "--ids-clean", CLEAN, "--ids-corrupt", CORRUPT,
                     "--what", "resid")
    assert rc == 0
    rows = out.splitlines()[3:]
    assert "corrupted +0.000" in out and rows and all(r.endswith(" +0.000") for r in rows), out
    assert "-0.000" not in out


def test_the_table_writes_a_negative_effect_with_an_ascii_minus(cli, monkeypatch):
    """The command line's numbers are read by programs: a negative effect and diff are written
    with "-" (the window writes "−"), and each row's number parses back."""
    from dataclasses import replace

    real = PT.patch

    def negative(*args, **kw):
        r = real(*args, **kw)
        return replace(r, metric=replace(r.metric, diff_corrupt=-0.25), effect=np.full_like(r.effect, -0.5))

    monkeypatch.setattr(PT, "patch", negative)
    rc, out, _ = cli("patch", "--model", GPT2, "--ids-clean", CLEAN, "--ids-corrupt", CORRUPT,
                     "--what", "resid")
    assert rc == 0
    rows = out.splitlines()[3:]
    assert "corrupted -0.250" in out and "\u2212" not in out, out
    assert rows and all(float(r.split()[-1]) == -0.5 for r in rows), out


def test_the_tables_label_tokens_as_the_window_does(cli, tmp_path):
    """A SentencePiece vocabulary marks a word's leading space (▁): a text's first word has it
    from the space the tokenizer adds, which the window's labels (and the Patching panel's) leave
    out; so do the command's."""
    path = str(spm_model(tmp_path / "spm.gguf"))
    clean = load_model(path).prepare("Mary went to the store").labels
    assert clean[1] == "Mary"  # (the space the tokenizer added is not the text's)
    rc, out, _ = cli("patch", "--model", path, "--clean", "Mary went to the store",
                     "--corrupt", "John went to the store", "--what", "resid", "--position", "1")
    assert rc == 0
    assert "at token 1 'Mary'" in out.splitlines()[0]
    assert "at 1 'Mary'/'John'" in out and "·Mary" not in out


def test_mlp_out_of_the_attention_only_toy_is_noted_above_its_table(cli, toy):
    """The toy's MLPs are stored as zeros: the table of +0.000 comes under a line saying why."""
    args = ("patch", "--model", "attnviz-toy-stdlib", "--clean", "def add(a, b): return a + b",
            "--corrupt", "def add(a, c): return a + c")
    rc, out, _ = cli(*args, "--what", "mlp_out")
    assert rc == 0
    lines = out.splitlines()
    assert lines[2] == ("note: attnviz-toy-stdlib's MLPs are stored as zeros (an attention-only model): "
                        "each writes exactly 0, so patching its output changes nothing")
    assert lines[3].startswith("effect = ")
    rc, out, _ = cli(*args, "--what", "mlp_out", "--json")
    assert json.loads(out)["note"] == lines[2][len("note: "):]
    rc, out, _ = cli(*args, "--what", "resid")
    assert "note:" not in out and "stored as zeros" not in out


def test_a_number_typed_as_a_token_is_its_text_in_every_command_as_in_the_tab(cli, toy):
    """One rule (predict.vocab_token) for the Patching tab's Target and Alt and every command's
    token options: `1` is the token "1", `#1` the id 1, here and in predict, ablation-scan,
    circuits and export alike."""
    from attnviz.ui.machinery.patch_jobs import check

    one = toy.tokenizer.token_to_id("1")
    assert one != 1
    texts = ("def add(a, b): return a + b", "def add(a, c): return a + c")
    assert check(toy, *texts, "head_out", 0, "denoise", "1", "#1").target == one  # the tab
    assert check(toy, *texts, "head_out", 0, "denoise", "1", "#1").alt == 1
    base = ("--model", "attnviz-toy-stdlib")
    rc, out, err = cli("patch", *base, "--clean", texts[0], "--corrupt", texts[1], "--what", "head_out",
                       "--target", "1", "--alt", "#1", "--json")
    assert rc == 0, err
    assert (json.loads(out)["target"], json.loads(out)["alt"]) == (one, 1)
    rc, out, err = cli("predict", *base, "--text", texts[0], "--target", "1", "--alt", "#1", "--json")
    assert rc == 0, err
    assert (json.loads(out)["target"], json.loads(out)["alt"]) == (one, 1)
    rc, out, err = cli("ablation-scan", *base, "--text", texts[0], "--target", "1", "--json")
    assert rc == 0, err
    assert json.loads(out)["target"] == one
    rc, out, err = cli("circuits", *base, "--head", "1.0", "--token", "1")
    assert rc == 0 and f"attending to '1' ({one}) writes" in out, err
