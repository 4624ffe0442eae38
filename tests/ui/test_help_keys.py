"""Help > Keys and mouse (F1) lists every key: each row of the guide's table of keys
(docs/window.md) and each shortcut of every menu entry, and the mouse's gestures."""

import re
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMenu, QMessageBox

ROOT = Path(__file__).resolve().parents[2]


def guide_keys() -> list[str]:
    """The first column of docs/window.md's table under ## Keys."""
    section = (ROOT / "docs" / "window.md").read_text(encoding="utf-8").split("## Keys", 1)[1]
    rows = re.findall(r"^\| ([^|]+) \| [^|]+ \|$", section.split("\n## ", 1)[0], re.M)
    return [r.strip() for r in rows if r.strip() not in ("keys", "---")]


def menu_shortcuts(window) -> set[str]:
    found = set()
    for menu in window.menuBar().findChildren(QMenu) + [a.menu() for a in window.menuBar().actions()]:
        for act in menu.actions():
            found.update(k.toString() for k in act.shortcuts())
    return found


def test_f1_lists_every_key_of_the_guide_and_the_menus(window, qtbot, monkeypatch):
    shown = []
    def opened(box):  # (modal: read instead of shown)
        box.show()
        shown.append((box.windowTitle(), box.text(), box.findChild(QLabel, "qt_msgbox_label").width()))
        box.close()
    monkeypatch.setattr(QMessageBox, "exec", opened)
    window.text_box.setFocus()
    qtbot.keyClick(window.text_box, Qt.Key.Key_F1)
    assert len(shown) == 1 and shown[0][0] == "Keys and mouse"
    text = shown[0][1]
    assert shown[0][2] >= 500  # (wide enough for the two columns of keys and what they do)
    keys = guide_keys()
    assert "Ctrl+E" in keys and "F1" in keys  # (the table was read)
    for key in keys:
        assert f"<b>{key}</b>" in text, key
    shortcuts = menu_shortcuts(window)
    assert {"Ctrl+O", "Ctrl+Shift+G", "PgUp", "Ctrl+Q", "F1"} <= shortcuts
    for key in shortcuts:
        assert key in text, key
    for gesture in ("Shift+click", "Alt+click", "right-click", "hover"):
        assert gesture in text
    help_menu = [a.menu() for a in window.menuBar().actions() if a.text() == "&Help"][0]
    assert [a.text() for a in help_menu.actions()] == ["&Keys and mouse", "&About attnviz"]
