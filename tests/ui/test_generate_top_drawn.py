"""The Generate panel's top-10 of a token drawn at a temperature: each token's probability in the
model and the probability it had in the draw (temperature applied, cut to the top-p set,
renormalised; 0 outside the set), checked against a recompute and the definition; the title says
which is which, and greedy's says the first is taken."""

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument

from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import Trace
from windows import IOI, TOY, WAIT, open_window


def shown(label) -> str:  # a rich-text label's text as it reads on screen
    doc = QTextDocument()
    doc.setHtml(label.text())
    return doc.toPlainText()


def test_a_drawn_tokens_top_10_shows_the_model_and_the_draw(qtbot, settings_path):
    w = open_window(qtbot, settings_path, model=TOY, text=IOI)
    gen, panel, model = w.state.generation, w.generate_panel, w.state.model
    temperature, top_p = 0.8, 0.6
    panel.n_spin.setValue(3)
    panel.temp_spin.setValue(temperature)
    panel.top_p_spin.setValue(top_p)
    panel.seed_spin.setValue(5)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 3, timeout=WAIT)
    seq = gen.prompt_ids + [s.id for s in gen.steps]
    cut = 0
    for s, step in enumerate(gen.steps):
        panel.slider.setValue(s)
        r = model.run(ids=np.asarray(seq[:step.T]), trace=Trace(resid=True), request=RunRequest(use_cache=False))
        logprobs = log_softmax(model.lm_head().logits(r.trace.resid[-1][-1:])[0])
        p, q = np.exp(logprobs), np.exp(log_softmax(logprobs / temperature))
        order = np.argsort(-q, kind="stable")
        keep = set(order[:int(np.searchsorted(np.cumsum(q[order]), top_p * q.sum())) + 1].tolist())
        mass = sum(q[i] for i in keep)
        lines = [c for c in shown(panel.top_label).split("\n") if c.strip()]
        assert lines[0] == ("The model's top 10, with the probability each had in the draw "
                            "(temperature and top-p applied):")
        assert [c.strip() for c in lines[1:3]] == ["model", "in the draw"]
        cells = [c for i in order[:10] for c in ("▶" if int(i) == step.id else "", token_text(model, int(i)),
                                                 f"{p[i]:.3f}", f"{q[i] / mass if i in keep else 0.0:.3f}")]
        if step.id not in order[:10]:
            cells.append(f"drawn: {token_text(model, step.id)} (outside the top 10)")
        assert lines[3:] == [c for c in cells if c.strip()], s
        cut += len(keep) < 10
    assert cut  # (some step's top-p set is smaller than the top 10: zeros shown)

    panel.temp_spin.setValue(0.0)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 3, timeout=WAIT)
    assert shown(panel.top_label).split("\n")[0] == "The model's top 10 and the probability of each; greedy takes the first:"
    w.worker.wait_idle()
