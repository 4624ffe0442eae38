"""Side panels opened after the first result show that result, and follow the sentence to empty."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import re  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from attnviz.engine.reading.registry import WINDOW_MODEL  # noqa: E402
from windows import WAIT, drain_events, open_window, scores_settled, wait_for_text, widget  # noqa: E402

TEXT = "The keys to the cabinet are on the table."


def raise_dock(qtbot, w, dock):
    """Select a side panel's dock tab as a user would, until it is on screen (a raise in the same
    moment the docks are first laid out does not take)."""
    qtbot.waitUntil(lambda: (dock.raise_(), not dock.widget().visibleRegion().isEmpty())[1],
                    timeout=WAIT)


def test_find_opened_after_the_first_result_lists_its_tokens_and_heads(qtbot, settings_path):
    """Started with a text, the Find tab shows that text's tokens in both lists and every head ranked,
    the first time it is opened, before any edit."""
    w = open_window(qtbot, settings_path, text=TEXT)
    roles = w.roles_panel
    if roles is None:
        pytest.skip("side panels not installed")
    T = len(w.state.result.labels)
    raise_dock(qtbot, w, w.roles_dock)
    roles.tabs.setCurrentWidget(roles.find)
    find = roles.find
    qtbot.waitUntil(lambda: find.find_from.count() == T, timeout=WAIT)
    assert [find.find_to.itemText(i) for i in range(T)] == [f"{lab}@{i}" for i, lab in
                                                            enumerate(w.state.result.labels)]
    n_heads = w.state.model.config.n_layer * w.state.model.config.n_head
    assert find.find_table.rowCount() == n_heads
    assert find.find_table.item(0, 1).text().startswith("L")  # a head title, painted in the table
    # every number painted with three decimals (0.800 beside 0.876, never 0.8 or 0.7998)
    t = find.find_table
    delegate = t.itemDelegate()
    painted = [delegate.displayText(t.item(r, c).data(Qt.ItemDataRole.DisplayRole), t.locale())
               for r in range(t.rowCount()) for c in (2, 3)]
    assert all(re.fullmatch(r"\u2212?\d+\.\d{3}", x) for x in painted), painted[:10]  # ("−": the window's minus)
    ranks = [delegate.displayText(t.item(r, 0).data(Qt.ItemDataRole.DisplayRole), t.locale())
             for r in range(3)]
    assert ranks == ["1", "2", "3"]  # counts stay whole numbers
    assert "every head ranked" in find.find_status.text()
    scores_settled(w.worker)
    w.worker.wait_idle()


def test_calculator_follows_the_sentence_to_empty(qtbot, settings_path):
    """After the sentence is cleared (Ctrl+A, Backspace) the Calculator's sentence line says 0 tokens
    and its live-cache line no longer describes the old sentence's tokens."""
    w = open_window(qtbot, settings_path, model=WINDOW_MODEL, text="Return the sum of a and b.")
    calc = w.calc_panel
    if calc is None:
        pytest.skip("side panels not installed")
    raise_dock(qtbot, w, w.calc_dock)
    T = len(w.state.result.tokens)
    qtbot.waitUntil(lambda: f"{T} tokens" in calc.sentence_label.text(), timeout=WAIT)
    qtbot.waitUntil(lambda: f"its tokens' K and V: <b>{T} tokens" in calc.live_label.text(),
                    timeout=WAIT)
    w.text_box.setFocus()
    qtbot.keyClick(w.text_box, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(w.text_box, Qt.Key.Key_Backspace)
    qtbot.waitUntil(lambda: widget(w, "tokens_label").text() == "0 tokens", timeout=WAIT)
    qtbot.waitUntil(lambda: "0 tokens" in calc.sentence_label.text(), timeout=WAIT)
    assert f"{T} tokens" not in calc.sentence_label.text()
    assert not (calc.live_label.isVisible() and f"{T} tokens" in calc.live_label.text())
    # typing again brings both lines back; an edit that keeps one token says so in the singular
    w.text_box.setPlainText("The")
    wait_for_text(qtbot, w, "The")
    qtbot.waitUntil(lambda: "this sentence: <b>1 token →" in calc.sentence_label.text(), timeout=WAIT)
    w.text_box.setPlainText("The keys")
    wait_for_text(qtbot, w, "The keys")
    assert w.state.result.cache_reused == 1
    qtbot.waitUntil(lambda: "this edit reused 1 token and computed 1" in calc.live_label.text(),
                    timeout=WAIT)
    # the footer: one sentence per note
    lines = calc.notes_label.text().splitlines()
    assert lines and all(line[0].isupper() and line.endswith(".") for line in lines), lines
    assert any("[out, in]" in line and "[in, out]" in line for line in lines)
    w.worker.wait_idle()


def _whole_or_scrollable(label):
    """The label's text is all on screen, or it sits in a scroll area that reaches its last line."""
    from PySide6.QtWidgets import QScrollArea

    need = label.heightForWidth(label.width())
    area = label.parentWidget()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    if area is None:
        return label.height() >= need
    bar = area.verticalScrollBar()
    return label.height() >= need and area.viewport().height() + bar.maximum() >= need


def test_head_roles_summary_is_never_cut_after_a_probe(qtbot, settings_path):
    """After the agreement probe, the summary is whole in a tall window and scrollable to its end in
    a short one; the window keeps the size it was given."""
    w = open_window(qtbot, settings_path)
    roles = w.roles_panel
    if roles is None:
        pytest.skip("side panels not installed")
    w.resize(1280, 560)
    raise_dock(qtbot, w, w.roles_dock)
    roles.set_source("agreement")
    label = roles.summary
    qtbot.waitUntil(lambda: "sentences scored" in label.text(), timeout=120000)
    qtbot.waitUntil(lambda: _whole_or_scrollable(label), timeout=WAIT)
    assert w.height() == 560
    w.resize(1920, 1080)
    qtbot.waitUntil(lambda: label.height() >= label.heightForWidth(label.width()), timeout=WAIT)
    assert label.visibleRegion().boundingRect().height() >= label.heightForWidth(label.width())
    scores_settled(w.worker)
    w.worker.wait_idle()


def test_a_calculator_with_room_for_all_its_lines_follows_each_sentence(qtbot, tmp_path, textbook_window):
    """In a window tall enough that the Calculator needs no scroll bar (its scroll area then covers
    the whole panel) it still follows each new sentence: its line gives the new token count, not
    the count of the text before. Behind another tab it waits, and catches up when raised."""
    from PySide6.QtWidgets import QScrollArea

    w = textbook_window(tmp_path / "s.ini", ready=True)
    calc = w.calc_panel
    raise_dock(qtbot, w, w.calc_dock)
    w.resize(1400, 2400)
    qtbot.waitUntil(lambda: not calc.findChild(QScrollArea).verticalScrollBar().isVisible(), timeout=WAIT)
    for text in ("the dog sat", "the dog sat on a big red mat today"):
        w.text_box.setPlainText(text)
        wait_for_text(qtbot, w, text)
        T = len(w.state.result.tokens)
        qtbot.waitUntil(lambda: f"this sentence: <b>{T} tokens" in calc.sentence_label.text(), timeout=WAIT)
        assert f"its tokens' K and V: <b>{T} tokens" in calc.live_label.text()
    w.focus_dock.raise_()
    drain_events()
    w.text_box.setPlainText("the cat")
    wait_for_text(qtbot, w, "the cat")
    T = len(w.state.result.tokens)
    assert f"this sentence: <b>{T} tokens" not in calc.sentence_label.text()  # behind a tab: waits
    w.calc_dock.raise_()
    qtbot.waitUntil(lambda: f"this sentence: <b>{T} tokens" in calc.sentence_label.text(), timeout=WAIT)
    w.worker.wait_idle()
