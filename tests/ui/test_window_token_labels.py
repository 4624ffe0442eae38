"""Every token the window writes into a line of text (the token strip's hover, Find's status line,
the knock-out menu, the Patching tab's position, sides and hover, the Generate panel's step, the
Circuits tab's OV line) is written as the strip labels it: between quotes, no repr escapes. The texts
hold a token with a leading space and a quote ("·'"), one with a backslash, and byte pieces
("<E6>"); repr would write them "·'" in double quotes and '\\\\'."""

import pytest
from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from attnviz.engine.computing.model import token_text
from attnviz.ui.machinery.patch_jobs import SEP
from attnviz.ui.panels.ablation_panel import head_menu
from attnviz.ui.views.tokens import TokenStrip
from windows import WAIT, hover, open_window, tip_shown, wait_for_text

TEXT = "x '\\' \u6770 ok"  # SmolLM2: x ·'\ ' ·<E6> <9D> <B0>杰 ·ok
TRICKY = "\u00b7'\\"  # a leading space, a quote and a backslash in one token
BYTE = "\u00b7<E6>"  # a byte piece after a space


@pytest.fixture
def smol(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    assert w.state.result.labels[1] == TRICKY and w.state.result.labels[3] == BYTE
    yield w
    w.state.generation.stop()
    w.worker.wait_idle()


def test_the_token_strips_hover_names_the_token_and_its_piece_without_escapes(smol, qtbot):
    r = smol.state.result
    strip = smol.findChild(TokenStrip)
    qtbot.waitUntil(lambda: strip.token_rect(1).width() > 0, timeout=WAIT)
    for i in (1, 3):
        at = strip.token_rect(i).center()
        QApplication.sendEvent(strip, QHelpEvent(QEvent.Type.ToolTip, at, strip.mapToGlobal(at)))
        qtbot.waitUntil(lambda: tip_shown(QToolTip.text()).startswith(f"#{i}: "), timeout=WAIT)
        assert tip_shown(QToolTip.text()).startswith(f"#{i}: '{r.labels[i]}', piece '{r.tokens[i]}', "
                                          f"id {int(r.input_ids[i])} (")
    assert r.tokens[1] == "\u0120'\\"  # (the tokenizer's own piece: "Ġ'\")
    QToolTip.hideText()


def test_finds_status_line_names_query_and_key_as_labelled(smol, qtbot):
    find = smol.roles_panel.find
    assert find.set_find("@3", "@1") is not None
    assert find.find_status.text().startswith(f"From '{BYTE}'@3 (query) to '{TRICKY}'@1 (key): ")
    assert find.set_find("@1", "@3") is None  # (a decoder: the key after the query is refused)
    assert find.find_status.text().startswith(f"the key '{BYTE}'@3 comes after the query '{TRICKY}'@1")


def test_the_knock_out_menu_names_the_edge_as_labelled(smol):
    texts = [a.text() for a in head_menu(smol.state, 2, 1, 3, 1, smol).actions()]
    assert f"Knock out 3 '{BYTE}' \u2192 1 '{TRICKY}' in layer 2" in texts


def test_the_generate_panels_step_names_the_token_as_labelled(smol, qtbot):
    """A text that repeats itself: the greedy answer copies its tokens (·'\\ ' ·<E6> <9D> <B0> ·y)."""
    w, gen, panel = smol, smol.state.generation, smol.generate_panel
    text = "x '\\' \u6770 y '\\' \u6770 x '\\' \u6770 y '\\' \u6770 x"
    w.set_text(text)
    wait_for_text(qtbot, w, text)
    panel.n_spin.setValue(6)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 6, timeout=4 * WAIT)
    labels = [s.token for s in gen.steps]
    assert TRICKY in labels and BYTE in labels
    assert labels == [token_text(w.state.model, s.id) for s in gen.steps]
    for s, step in enumerate(gen.steps):
        panel.slider.setValue(s)
        assert panel.step_label.text() == f"Step {s + 1} of 6: '{step.token}' (read {step.T} tokens)"


def test_the_patching_tab_names_its_tokens_as_labelled(patching_window, qtbot):
    """On the toy decoder: " '" is one token (·'), the backslash another, 杰 three byte pieces."""
    w = patching_window
    p = w.patching_panel
    m = w.state.model
    clean = "When x '\\' \u6770 gave"
    w.set_text(clean)
    wait_for_text(qtbot, w, clean)
    p.corrupt_box.setText("When y '\\' \u6770 gave")
    labels = m.labels(m.encode(clean)[0])
    q, b = labels.index("\u00b7'"), labels.index("\\")
    assert labels[b + 3] == "<E6>"
    p.position_box.setValue(b)
    qtbot.waitUntil(lambda: p.position_label.text() == f"P = {b} '\\': the next token after it is scored",
                    timeout=WAIT)
    p.position_box.setValue(b + 3)
    assert p.position_label.text() == f"P = {b + 3} '<E6>': the next token after it is scored"
    p.position_box.setValue(q)
    assert p.position_label.text() == f"P = {q} '\u00b7'': the next token after it is scored"
    p.target_edit.setText("\\")
    p.alt_edit.setText("\u0120'")  # the tokenizer's own spelling of " '"
    p.what_box.setCurrentText("resid")
    with qtbot.waitSignal(w.patch_jobs.sigChanged, timeout=WAIT):
        qtbot.mouseClick(p.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.patch_jobs.running and p.map.view is not None, timeout=WAIT)
    s = w.patch_jobs.sides
    assert p.sides_label.text() == (
        f"At {q}: clean top-1 '{s.top_clean}', corrupted top-1 '{s.top_corrupt}'. "
        + f"diff = logit('\\') \u2212 logit('\u00b7''): clean {s.metric.diff_clean:+.4f}, "
        f"corrupted {s.metric.diff_corrupt:+.4f}".replace("-", "\u2212"))
    assert p.map.view.metric_line().startswith(f"at {q} '\u00b7'': diff = logit('\\') \u2212 logit('\u00b7'');")
    x, y = p.map.cell_center(0, b)
    hover(p.map, QPoint(int(x), int(y)))
    assert p.map.hover_text.startswith(f"L0 at {b} '\\'")
    xy = labels.index("\u00b7x")
    x, y = p.map.cell_center(0, xy)
    hover(p.map, QPoint(int(x), int(y)))
    assert p.map.hover_text.startswith(f"L0 at {xy} '\u00b7x'/'\u00b7y'")
    p.corrupt_box.setText("When y z '\\' \u6770 gave")  # a token more: the two lists shown aligned
    qtbot.waitUntil(lambda: p.aligned.text() != "", timeout=WAIT)
    row = p.aligned.text().split("\n")[0][len("corrupted "):]
    assert [c.strip() for c in row.split(SEP)][:len(labels)] == labels
