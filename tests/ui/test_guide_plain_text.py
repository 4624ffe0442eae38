"""The guide bar shows its message as plain text: a token label that looks like markup ('<s>',
'<|im_start|>') or holds '&' is shown as the strip labels it, not swallowed as a tag."""

from PySide6.QtGui import QTextDocument

from attnviz.engine.analysing import samples
from attnviz.engine.reading.registry import TOY_MODEL
from windows import WAIT, open_window

MESSAGE = "L0 H0: from '<s>' \u2192 '<|im_start|>' & 'a'"


def test_a_guide_naming_markup_like_tokens_shows_them(qtbot, settings_path, monkeypatch):
    monkeypatch.setattr(samples, "guide", lambda *a, **k: samples.Guide(0, 0, True, MESSAGE))
    w = open_window(qtbot, settings_path, model=TOY_MODEL, text=samples.SAMPLES[0].text)
    doc = QTextDocument()

    def shown() -> str:
        doc.setHtml(w.guide_bar.answer.text())
        return doc.toPlainText()
    qtbot.waitUntil(lambda: "L0 H0" in shown(), timeout=WAIT)
    assert MESSAGE in shown()
    w.worker.wait_idle()
