"""`attnviz export --model PATH` keeps the model's absolute path in the sidecar beside its name,
and File -> Open view in a fresh window opens the model from that path."""

import json
import sys
from pathlib import Path

from attnviz.cli import main
from windows import WAIT, open_window, widget

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_files import spm_model  # noqa: E402

TEXT = "The keys to the cabinet are on the table."


def test_the_command_lines_sidecar_reopens_a_model_given_by_path(qtbot, tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    model = spm_model(tmp_path / "models" / "s.gguf")
    monkeypatch.chdir(tmp_path)  # given by a relative path: the sidecar holds the absolute one
    assert main(["export", "--model", "models/s.gguf", "--text", TEXT, "--layer", "0", "--head", "1",
                 "--width", "400", "--out", "head.png"]) == 0
    doc = json.loads((tmp_path / "head.png.json").read_text())
    assert doc["model_path"] == str(model) and doc["model"] == "s"

    w = open_window(qtbot, tmp_path / "w.ini")  # on MiniLM
    w.open_view(str(tmp_path / "head.png.json"))
    qtbot.waitUntil(lambda: w.state.model_name == "s" and w.state.result is not None
                    and w.state.text == TEXT and not w.state.loading, timeout=WAIT)
    assert w.windowTitle() == "attnviz — s" and w.state.model_source == str(model)
    assert w.state.focus == (0, 1) and not widget(w, "error_banner").isVisible()
