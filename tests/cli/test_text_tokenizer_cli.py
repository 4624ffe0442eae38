"""`attention`, `heads` and `find` on a GGUF model give load_model their text, so its tokenizer holds
only the tokens and merges that text can meet (engine/reading/gguf_text_vocab.py), as `predict`'s
does: their output is the whole vocabulary's, byte for byte."""

import json

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.commands import engine_cmds, heads_cmd

SMOLLM2 = "SmolLM2-135M-Instruct"
TEXT = "The capital of France is Paris, où l'on parle français 🙂  twice."


def _loads(monkeypatch, module, whole: bool) -> list:
    """load_model in `module` recorded (the models it gave); `whole`: given no text, so the whole
    vocabulary is built as before."""
    real, models = module.load_model, []

    def load(name, **kw):
        models.append(real(name, **({**kw, "text": None} if whole else kw)))
        return models[-1]

    monkeypatch.setattr(module, "load_model", load)
    return models


def _twice(monkeypatch, module, run):
    """run() with the command's own load, then with the whole vocabulary's: both outputs."""
    outs = []
    for whole in (False, True):
        with monkeypatch.context() as m:
            models = _loads(m, module, whole)
            outs.append(run(whole))
        (model,) = models
        assert model.tokenizer.for_every_text == whole  # (the text's own tokenizer was taken)
    return outs


def test_attention_writes_what_the_whole_vocabulary_gives(tmp_path, monkeypatch):
    def run(whole):
        out = tmp_path / f"a{int(whole)}.npz"
        assert main(["attention", "--model", SMOLLM2, "--text", TEXT, "--out", str(out)]) == 0
        with np.load(out) as f:
            return {k: f[k] for k in f.files}

    mine, whole = _twice(monkeypatch, engine_cmds, run)
    assert mine.keys() == whole.keys() and "attentions" in mine
    for key in mine:
        assert np.array_equal(mine[key], whole[key]), key


@pytest.mark.parametrize("command", [
    ["heads", "--model", SMOLLM2, "--text", TEXT, "--json"],
    ["find", "--model", SMOLLM2, "--text", TEXT, "--from", "twice", "--to", "Paris", "--top", "5",
     "--json"]], ids=lambda c: c[0])
def test_heads_and_find_print_what_the_whole_vocabulary_gives(command, monkeypatch, capsys):
    def run(_):
        assert main(command) == 0
        return json.loads(capsys.readouterr().out)

    mine, whole = _twice(monkeypatch, heads_cmd, run)
    assert mine == whole and mine
