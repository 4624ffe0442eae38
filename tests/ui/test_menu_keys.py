"""Every key the guide's table names is shown in the menus where a user looks for it: Quit's Ctrl+Q
on every platform theme (the offscreen one, like Windows', binds no quit key of its own), and the
open keys in the Models menu as in File."""

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence


def menu(window, title: str):
    found = [a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == title]
    assert len(found) == 1, title
    return found[0]


def keys(m) -> dict[str, list[str]]:
    return {a.text().replace("&", ""): [k.toString() for k in a.shortcuts()]
            for a in m.actions() if not a.isSeparator()}


def test_quit_shows_and_takes_ctrl_q(window, qtbot):
    assert "Ctrl+Q" in keys(menu(window, "File"))["Quit"]
    window.text_box.setFocus()
    qtbot.keyClick(window.text_box, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=5000)


def test_the_models_menu_shows_the_open_keys(window, qtbot):
    models = menu(window, "Models")
    models.aboutToShow.emit()
    shown = keys(models)
    assert shown["Open model…"] == ["Ctrl+O"]
    assert shown["Open model file (GGUF)…"] == ["Ctrl+Shift+G"]
    assert QKeySequence("Ctrl+O").toString() in keys(menu(window, "File"))["Open model…"]
