"""Local (sliding-window) and global layers on screen: the layer selector and head titles say which,
and the grid and the focus view draw the window's edge on local layers once the text is longer
than the window (a tiny Gemma-3-shaped model: 7 layers, layer 5 global, window 8)."""

from tiny import FIXTURES
from windows import WAIT, open_window, wait_for_text

LONG = ", ".join(str(i) for i in range(1, 21))  # 20 token ids, longer than the window
SHORT = "1, 2, 3, 4, 5"


def test_local_and_global_layers_are_named_and_the_window_edge_drawn(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(FIXTURES / "gemma3"), text=LONG)
    st = w.state
    st.set_layer(0)
    st.set_focus(0, 1)
    qtbot.waitUntil(lambda: w.controls.layer_kind.text() == "local (window 8)", timeout=WAIT)
    assert w.controls.layer_kind.isVisible()
    assert any("L0 H1 · local (window 8)" in t for t in w.grid.titles())
    assert "local (window 8)" in w.focus_view.title.text()
    assert w.grid.window_line.isVisible() and w.focus_view.window_line.isVisible()
    # the grid's edge: 12 rows have a masked key (q = 8..19), two points each, on each of 4 heads
    assert w.grid.window_line.path().elementCount() == 4 * 2 * 12

    st.set_layer(5)
    st.set_focus(5, 0)
    qtbot.waitUntil(lambda: w.controls.layer_kind.text() == "global", timeout=WAIT)
    assert "global" in w.focus_view.title.text()
    assert not w.grid.window_line.isVisible() and not w.focus_view.window_line.isVisible()

    st.set_layer(0)
    st.set_focus(0, 0)
    st.set_text(SHORT)
    wait_for_text(qtbot, w, SHORT)
    qtbot.waitUntil(lambda: not w.grid.window_line.isVisible(), timeout=WAIT)
    assert not w.focus_view.window_line.isVisible()  # the text fits in the window: no edge


def test_a_model_without_a_window_names_no_layer_kind(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini")
    assert not w.controls.layer_kind.isVisible()
    assert not any("local" in t or "global" in t for t in w.grid.titles())
