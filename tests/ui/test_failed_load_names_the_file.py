"""Opening a model whose files disagree (a config.json that counts more layers than its weights
hold, a vocab_size that is not its embedding's rows): the window says which file and what is
wrong, and keeps the model it showed."""

import json

import pytest

from tiny import tiny_text_model
from windows import WAIT, drain_events, open_window, widget


@pytest.mark.parametrize("edit, said", [
    ({"num_hidden_layers": 4}, "{config} sets num_hidden_layers to 4, but model.safetensors holds "
                               "only layers 0..1: set num_hidden_layers to 2 if the model has 2 layers"),
    ({"vocab_size": 300}, "{config} sets vocab_size to 300, but the token embedding "
                          "model.embed_tokens.weight in model.safetensors has 259 rows"),
])
def test_a_model_whose_files_disagree_is_refused_by_name_and_the_last_stays(qtbot, tmp_path, edit, said):
    folder = tiny_text_model(tmp_path / "broken")
    config = folder / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **edit}))
    w = open_window(qtbot, tmp_path / "s.ini")
    w.load_model(str(folder))
    banner = widget(w, "error_banner")
    qtbot.waitUntil(lambda: banner.isVisible() and w.state.loading == "", timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    text = banner.text()
    assert said.format(config=config) in text, text
    assert text.endswith("Still showing all-MiniLM-L6-v2."), text
    assert "Traceback" not in text and "checkpoint has no tensor" not in text
    assert w.state.model.name == "all-MiniLM-L6-v2"
