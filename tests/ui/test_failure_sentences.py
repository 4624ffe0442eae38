"""What could not be done and why read as sentences: "Could not load model x." and then the
engine's own sentence, never "…: x/config.json: …" with one colon chained after another."""

import json

import pytest

from attnviz.engine import load_model
from attnviz.engine.errors import ModelLoadError
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
