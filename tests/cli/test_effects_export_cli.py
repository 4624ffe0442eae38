"""`attnviz export --view prediction|lens|dla` in a real process with no display: the numbers are
the engine's own analysis (ablation included) with the sidecar beside an image; an encoder is
refused in one line, naming why."""

import json
import os
import subprocess
import sys

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.analysing.effects import Ablation, analyse, window_run
from attnviz.figures.data import open_sidecar
from tiny import FIXTURES

TEXT = "the cat sat on the mat . the cat sat on the"


def _cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    return subprocess.run([sys.executable, "-m", "attnviz", "export", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_prediction_and_dla_exports_carry_the_engines_numbers(tmp_path):
    ids = "3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5"  # the tiny GPT-2 has no tokenizer: ids typed as text
    proc = _cli("--model", str(FIXTURES / "gpt2"), "--text", ids, "--view", "dla", "--position", "-3",
                "--ablate", "0.1", "--out", str(tmp_path / "d.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "d.json").read_text())
    gpt2 = load_model(FIXTURES / "gpt2")
    ref = analyse(gpt2, window_run(gpt2, ids, ablation=Ablation(heads=((0, 1),))), -3)
    assert doc["position"] == 8 and doc["target"] == ref.target and doc["alt"] == ref.alt
    np.testing.assert_allclose(doc["dla"], ref.dla.heads, atol=1e-6)
    assert np.abs(ref.dla.heads).max() > 1e-3 and doc["dla"][0][1] == 0  # the head switched off writes 0
    assert doc["ablation"]["heads"] == [[0, 1]] and doc["changed"] is True
    model = load_model("attnviz-textbook")
    ref = analyse(model, window_run(model, TEXT))
    proc = _cli("--model", "attnviz-textbook", "--text", TEXT, "--view", "prediction",
                "--out", str(tmp_path / "p.png"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    meta = open_sidecar(tmp_path / "p.png")
    assert meta["view"] == "prediction" and meta["top"][0]["id"] == int(ref.clean.top_ids[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "p.png", "p.png.json"]


def test_an_encoder_is_refused_in_one_line(tmp_path):
    proc = _cli("--model", "all-MiniLM-L6-v2", "--view", "lens", "--out", str(tmp_path / "l.json"), cwd=tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "predicts no next token" in last and last.endswith("--model SmolLM2-135M-Instruct")
    assert not (tmp_path / "l.json").exists()
