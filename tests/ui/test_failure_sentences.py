"""What could not be done and why read as sentences: "Could not load model x." and then the
engine's own sentence, never "…: x/config.json: …" with one colon chained after another."""

import ast
import json
import re
from pathlib import Path

import pytest

from attnviz.engine import load_model
from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.validate import SENTENCE_STARTS
from attnviz.ui.machinery.runner import failure
from tiny import tiny_llama
from windows import WAIT, widget


def test_a_failure_is_its_lead_and_its_error_each_a_sentence():
    assert failure("Export failed", "cannot write /a/b.png: permission denied") == \
        "Export failed. Cannot write /a/b.png: permission denied."
    assert failure("The scan failed", "unexpected ValueError: bad (details in the log).") == \
        "The scan failed. Unexpected ValueError: bad (details in the log)."
    # a file, a path or a key keeps its case: its name is how it is spelt
    assert failure("Could not load model m", "m/config.json sets n_head to 0, but it must be 1..64") == \
        "Could not load model m. m/config.json sets n_head to 0, but it must be 1..64."
    assert failure("Could not compare", "tokenizer.json is broken") == "Could not compare. tokenizer.json is broken."
    assert failure("Is it?", "") == "Is it?"


def test_a_failure_keeps_the_dots_of_its_text_and_the_case_of_a_name():
    # a period is added, never taken: "." is a path, "..." the error's own words
    assert failure("Could not load model .", "x") == "Could not load model . x."
    assert failure("Could not compare", "Ran out of memory...") == "Could not compare. Ran out of memory..."
    assert failure("Could not compare", "stopped…") == "Could not compare. Stopped…"
    assert failure("Could not read it", "text.json is broken") == "Could not read it. text.json is broken."
    # an error that starts with a model or folder name keeps its case (compare_b.py's message)
    assert failure("Could not compare with tiny", "tiny has no training checkpoints to compare with") == \
        "Could not compare with tiny. tiny has no training checkpoints to compare with."
    assert failure("Could not load model q", "attnviz reads no final norm") == \
        "Could not load model q. attnviz reads no final norm."


# first words of messages that are names, kept lowercase: the product, a variable, a spec key
NAMES = {"attnviz", "x", "arch", "ids", "attentions"}


def test_every_plain_first_word_of_the_projects_errors_gets_its_capital():
    """Each error raised with a literal message whose first word is a lowercase word is either a
    sentence start failure() capitalises or a name it leaves alone: a new message cannot stay
    lowercase in the banner unnoticed."""
    root = Path(__file__).resolve().parents[2] / "attnviz"
    missing = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            arg = node.exc.args[0]
            arg = arg.left if isinstance(arg, ast.BinOp) else arg
            if isinstance(arg, ast.JoinedStr):  # (one that starts with a {value}: a name, kept)
                arg = arg.values[0] if arg.values else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                word = (arg.value.split(maxsplit=1) or [""])[0].rstrip(",:;…")
                if re.fullmatch("[a-z]+", word) and word not in SENTENCE_STARTS | NAMES:
                    missing[word] = f"{path.relative_to(root)}:{node.lineno}"
    assert not missing, missing


def test_a_model_that_does_not_load_reads_as_two_sentences_in_the_banner(window, qtbot, tmp_path):
    folder = tiny_llama(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "rms_norm_eps": "x"}))
    with pytest.raises(ModelLoadError) as err:
        load_model(folder)
    why = str(err.value)
    assert why == f"{folder / 'config.json'} sets rms_norm_eps to 'x', but it must be a positive finite number"
    shown = window.state.model_name
    window.load_model(str(folder))
    banner = widget(window, "error_banner")
    qtbot.waitUntil(lambda: banner.isVisible(), timeout=WAIT)
    assert banner.text() == f"Could not load model {folder}. {why}. Still showing {shown}."
