"""The Generate panel's K and V line on a sliding-window model: past the window the calculator's
figure is smaller than the generation's (it keeps only the window's last tokens on the windowed
layers, the generation keeps every token's), and the line says why beside the two numbers; within
the window the two are equal and nothing is added."""

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.computing.generate import generate, kv_bytes_per_position
from attnviz.ui.machinery.state import AppState
from attnviz.ui.panels.generate_panel import GeneratePanel
from tiny import FIXTURES


def test_the_kv_line_says_why_the_calculator_counts_less(qtbot):
    model = load_model(FIXTURES / "mistral_window")  # window 5 on both layers, float32 K and V
    st = AppState()
    st.set_model(model)
    panel = GeneratePanel(st)
    qtbot.addWidget(panel)
    gen = generate(model, ids=np.array([1, 5, 7]), max_new=6, ignore_eos=True)
    per = kv_bytes_per_position(model.config)
    short, long = gen.steps[1], gen.steps[-1]  # T = 4 and T = 8
    assert short.T == 4 and long.T == 8 and long.kv_bytes == 8 * per
    assert f"calculator at float32: {short.kv_bytes // 1024} KiB ({short.kv_bytes:,} bytes); held" in panel.kv_text(short)
    text = panel.kv_text(long)
    assert f"calculator at float32: 1.25 KiB ({5 * per:,} bytes: 2 of 2 layers keep only the last 5 tokens, where the " \
           "generation keeps every token's); held" in text, text
