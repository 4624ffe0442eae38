"""Help > Keys and mouse says what a right-click on a head in the grid does: it opens a menu (zero,
mean, a knockout of the cell, restore), and switches nothing off by itself (the help does not say
it switches the head off, as Alt+click does)."""

from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QMenu

from attnviz.ui.menus import MOUSE


def test_a_right_click_opens_the_menu_the_help_describes(window, qtbot, monkeypatch):
    popped = []
    monkeypatch.setattr(QMenu, "popup", lambda menu, *_a: popped.append(menu))
    g = window.grid
    x, y = g.cell_center(0, 1, 3, 2)
    at = g.gw.mapFromScene(g.vb.mapViewToScene(QPointF(x, y)))
    qtbot.mouseClick(g.gw.viewport(), Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier, at)
    assert window.state.effects.ablation.heads == ()  # nothing switched off by the click itself
    (menu,) = popped
    actions = [a.text() for a in menu.actions() if a.text()]
    assert actions[:2] == ["Switch L0 H1 off (zero)", "Switch L0 H1 off (mean)"]
    assert [a for a in actions if a.startswith("Knock out")][1].endswith("in every layer")
    said = dict(MOUSE)
    assert not any(g.startswith("Alt+click or right-click") for g in said)
    menu_line = said["right-click a head in the grid"]
    assert menu_line.startswith("a menu: switch it off (zero, or its mean over this text in the clean run)")
    assert "knock out the cell's query \u2192 key in this layer or every layer" in menu_line
    assert said["Alt+click a head in the grid"] == "switch it off (again: back on)"
