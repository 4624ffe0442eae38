"""Input edges found by fuzzing, in the real window: a lone surrogate reads the same in the sentence
box and the state, and a model whose finite weights overflow in the scores is refused at load,
the previous model, sentence and heatmaps kept, with a message."""

import os
import shutil
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

from windows import WAIT, open_window, wait_for_text, widget  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_a_lone_surrogate_reads_the_same_in_the_box_and_the_state(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    w.set_text("the keys \ud800 are")
    wait_for_text(qtbot, w, "the keys \ufffd are")
    assert w.text_box.toPlainText() == w.state.text == w.state.result.text == "the keys \ufffd are"
    w.worker.wait_idle()


def test_a_model_that_overflows_in_its_scores_is_refused_and_the_last_one_kept(qtbot, settings_path,
                                                                             tmp_path):
    toy = Path(ROOT / "resources" / "toy-stdlib-gpt2")
    broken = tmp_path / "overflow"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json"):  # the toy GPT-2, without its checkpoints
        shutil.copy(toy / name, broken / name)
    weights = load_file(str(toy / "model.safetensors"))
    for name in weights:
        if name.endswith("attn.c_attn.weight"):
            weights[name] = np.full(weights[name].shape, 1e38, np.float32)  # finite; q.k overflows
    save_file(weights, str(broken / "model.safetensors"))
    assert all(np.isfinite(v).all() for v in weights.values())

    w = open_window(qtbot, settings_path)
    before = w.state.model
    text, result = w.state.text, w.state.result
    w.load_model(str(broken))
    qtbot.waitUntil(lambda: widget(w, "error_banner").isVisible(), timeout=WAIT)
    assert "non-finite" in widget(w, "error_banner").text()
    assert w.state.model is before and w.state.model_name == "all-MiniLM-L6-v2"
    assert w.state.text == text and w.state.result is result
    assert w.windowTitle().endswith("all-MiniLM-L6-v2")
    # the kept model still computes
    w.set_text("The cat sat.")
    wait_for_text(qtbot, w, "The cat sat.")
    w.worker.wait_idle()
