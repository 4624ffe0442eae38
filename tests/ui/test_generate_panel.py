"""Every number the Generate panel shows, read from what it shows and checked against a computation
of its own: a greedy chat answer on SmolLM2 (transformers' tokens, tests/fixtures/smollm2) made
while another run holds the model's KV cache lock the whole time (the window's run of the growing
text, driven on purpose: tests/held_run.py). At every step: "Step s of n" counted from 1 (n steps),
the tokens read, the K and V bytes (T x 46,080: 30 layers x 3 KV heads x 64 d_head x K and V x 4
bytes) beside the calculator's equal figure, the top-10 and their probabilities from a full
recompute (token labels such as <|im_end|> as text, not markup), the rows of every head of the
layer, the plot and its marker, the hover's weight, and the status line while running and after."""

import json

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent, QTextDocument
from PySide6.QtWidgets import QApplication

from attnviz.engine.computing.generate import kv_positions
from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.trace import Trace
from held_run import HeldRun
from tiny import FIXTURES
from windows import WAIT, open_window
from attnviz.engine.computing.request import RunRequest

CASE = json.loads((FIXTURES / "smollm2" / "generate.json").read_text())["cases"][1]  # ends at <|im_end|>
PER_TOKEN = 30 * 3 * 64 * 2 * 4  # SmolLM2's K and V bytes per token, float32: 46,080


@pytest.fixture
def win(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=CASE["prompt"])
    yield w
    w.state.generation.stop()
    w.worker.wait_idle()


def shown(label) -> str:  # a rich-text label's text as it reads on screen
    doc = QTextDocument()
    doc.setHtml(label.text())
    return doc.toPlainText()


def binary(n: int) -> str:  # these byte counts in the panel's units: whole KiB, or MiB to 3 digits
    kib = n / 1024
    return f"{kib:.0f} KiB" if kib < 1024 else f"{kib / 1024:.3g} MiB"


def recompute(model, ids):  # -> (probabilities [vocab], patterns [n_layer, n_head, T, T]), no cache
    r = model.run(ids=np.asarray(ids), trace=Trace(resid=True), request=RunRequest(use_cache=False))
    return np.exp(log_softmax(model.lm_head().logits(r.trace.resid[-1][-1:])[0])), r.attentions


def test_every_number_the_panel_shows_while_another_run_holds_the_models_cache(win, qtbot, smollm2):
    w, gen, panel = win, win.state.generation, win.generate_panel
    cfg = smollm2.config
    assert cfg.n_layer * cfg.n_kv_head * cfg.d_head * 2 * 4 == PER_TOKEN and cfg.sliding_window is None
    prompt, answer = CASE["ids"], CASE["new_ids"]
    assert smollm2.tokenizer.encode(CASE["prompt"]).ids == prompt
    n = len(answer)
    running = []  # (steps so far, the status line) at each change while it runs
    gen.sigChanged.connect(lambda: gen.running and running.append((len(gen.steps), panel.status.text())))

    held = HeldRun(w.state.model, [1, 2, 3])
    held.start()
    try:
        qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not gen.running, timeout=4 * WAIT)
    finally:
        held.end()
    assert [s.id for s in gen.steps] == answer  # transformers' greedy tokens, ending at <|im_end|>
    assert panel.status.text() == f"{n} new tokens: stopped at the end-of-text token."
    assert running and all(text == f"Generating: {k} token{'s' * (k != 1)} so far…" for k, text in running)

    x, y = panel.curve.getData()
    np.testing.assert_array_equal(x, np.arange(1, n + 1))  # the axis counts steps as the label does
    # what the K and V arrays hold, room included: the tokens' bytes at least, kv_positions' at most
    np.testing.assert_allclose(y, [s.kv_held / 2 ** 20 for s in gen.steps], rtol=1e-12)
    for s, step in enumerate(gen.steps):
        T = len(prompt) + s
        assert T * PER_TOKEN == step.kv_bytes <= step.kv_held <= kv_positions(len(prompt), T)[0] * PER_TOKEN

    seq = prompt + answer
    for s in range(n):
        panel.slider.setValue(s)
        T = len(prompt) + s
        label = token_text(smollm2, answer[s])
        assert panel.step_label.text() == f"Step {s + 1} of {n}: '{label}' (read {T} tokens)"
        kv = T * PER_TOKEN
        held = gen.steps[s].kv_held
        assert panel.kv_label.text() == (f"KV of {T} tokens: {binary(kv)} ({kv:,} bytes); "
                                         f"calculator at float32: {binary(kv)} ({kv:,} bytes); held with room "
                                         f"for the next positions: {binary(held)} ({held:,} bytes)")
        assert panel.marker.value() == s + 1
        p, full = recompute(smollm2, seq[:T])
        top = np.argsort(-p, kind="stable")[:10]
        lines = shown(panel.top_label).split("\n")  # the table reads one cell a line
        assert lines[0] == "The model's top 10 and the probability of each; greedy takes the first:"
        cells = [c for i in top for c in ("▶" if int(i) == answer[s] else "",
                                          token_text(smollm2, int(i)), f"{p[i]:.3f}")]
        assert [c for c in lines[1:] if c.strip()] == [c for c in cells if c.strip()], s
        np.testing.assert_allclose(panel.rows_view.rows, full[w.state.layer, :, -1], atol=2e-5, rtol=0)

    assert "<|im_end|>" in shown(panel.top_label)  # the last step's token, as text
    view, rows = panel.rows_view, panel.rows_view.rows  # the last step: hover head 2, key 5
    area = view.area()
    pos = QPointF(area.left() + (5.5 / rows.shape[1]) * area.width(), area.top() + 2.5 * view.ROW)
    QApplication.sendEvent(view, QMouseEvent(QEvent.Type.MouseMove, pos, view.mapToGlobal(pos),
                                             Qt.MouseButton.NoButton, Qt.MouseButton.NoButton,
                                             Qt.KeyboardModifier.NoModifier))
    _, full = recompute(smollm2, seq[:len(seq) - 1])
    layer = w.state.layer
    key = smollm2.tokenizer.labels_for_ids(seq[:6])[1][5]
    assert view.hover_text.startswith(f"L{layer} H2 → {key} (key 5)  ")
    assert abs(float(view.hover_text.split()[-1]) - full[layer, 2, -1, 5]) < 1e-4
