"""The guide bar on a Find sample whose words the toy decoder reads in pieces (Pronouns: 'fit' and
'suitcase' hold an 'it' piece, 'trophy' is 5 pieces): the answer takes the sample's whole word ·it,
never asks the bar to pick among 'it's, and says what to pick in Find instead; Show me is off."""

from PySide6.QtGui import QTextDocument

from attnviz.engine.analysing.samples import SAMPLES
from windows import TOY, WAIT, open_window


def test_the_pronouns_guide_on_the_toy_says_what_find_can_take(qtbot, settings_path):
    s = next(x for x in SAMPLES if x.title == "Pronouns")
    w = open_window(qtbot, settings_path, model=TOY, text=s.text)
    bar = w.guide_bar
    qtbot.waitUntil(lambda: w.state.result is not None and "Finding" not in bar.answer.text()
                    and bool(bar.answer.text()), timeout=WAIT)
    doc = QTextDocument()
    doc.setHtml(bar.answer.text())
    shown = doc.toPlainText()
    labels = w.state.result.labels
    q = labels.index("\u00b7it")
    assert "pick one" not in shown and "occurs 3 times" not in shown, shown
    assert shown.startswith("This sample looks for 'it' \u2192 'trophy', one token to one token, but this "
                            "model reads 'trophy' as 5 tokens ("), shown
    assert shown.endswith(f"In Find (a tab of the Head roles panel), pick \u00b7it@{q} as the query and "
                          "a piece of 'trophy' as the key."), shown
    assert w.roles_panel.tabs.tabText(w.roles_panel.tabs.indexOf(w.roles_panel.find)) == "Find"
    assert not bar.show_button.isEnabled()
    w.worker.wait_idle()
