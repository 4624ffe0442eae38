"""Defects a new user hit in the window, each pinned by a test, offscreen."""

import pytest

from attnviz.ui.views.focus import FocusView
from attnviz.ui.machinery.state import AppState
from windows import WAIT, widget

TEXT = "The keys to the cabinet are on the table."


@pytest.fixture
def state(qtbot, minilm):
    st = AppState()
    st.set_model(minilm)
    st.set_result(minilm.run(TEXT))
    return st


def test_a_query_stays_only_on_the_same_token_after_the_same_prefix(state, minilm):
    assert state.result.labels[2] == "keys"
    state.set_query(2)
    state.set_result(minilm.run(TEXT + " Then"))  # typing on at the end: still "keys"
    assert state.query_pos == 2
    state.set_result(minilm.run("The key to the cabinet is on the table."))  # edited at the query
    assert state.query_pos is None
    state.set_query(8)  # "the"
    state.set_result(minilm.run("Violet anchor nine tulip gravel comet lantern otter"))
    assert state.query_pos is None  # another text: not "lantern (#8)" by position
    state.set_query(5)
    state.set_result(minilm.run("A lantern to the cabinet."))  # "cabinet" (#5) after other words
    assert state.result.labels[5] == "cabinet" and state.query_pos is None
    state.set_query(3)
    state.set_result(minilm.run("A lantern to the shed."))  # an edit after the query keeps it
    assert state.query_pos == 3


def key_labels(fv):
    return fv.axis_labels()[1]


def test_focus_view_with_hide_first_token_has_no_cls_column_label(state, qtbot):
    fv = FocusView(state)
    qtbot.addWidget(fv)
    fv.resize(440, 520)
    fv.show()
    state.set_focus(0, 3)
    assert key_labels(fv)[0] == "[CLS]"
    state.set_hide_first(True)
    # the hidden column stays a gap, as in the grid, but no label hangs over it
    assert key_labels(fv) == state.result.labels[1:]
    assert fv.axis_labels()[0] == state.result.labels
    state.set_hide_first(False)
    assert key_labels(fv) == state.result.labels


def test_token_strip_more_count_fits_inside_the_strip(qtbot):
    from attnviz.ui.views.tokens import TokenStrip

    words = ("The history of the printing press is a story about attention as much as about "
             "machines. Before Gutenberg, a scribe could copy a few pages a day, and a library of "
             "a hundred books was a treasure guarded by monks. When movable type arrived in Mainz "
             "around 1450, the price of a book fell so quickly that within fifty years").split()
    strip = TokenStrip()
    qtbot.addWidget(strip)
    fm = strip.fontMetrics()
    widths = range(300, 600, 7)  # four lines hold these tokens from about 640 px on
    for width in widths:
        strip.resize(width, 200)
        strip.set_tokens(words, [False] * len(words), None)  # (hidden: laid out at once)
        more = strip.more
        shown = len(words) - more  # the boxes of tokens 0..shown-1, inside the strip
        assert more > 0 and all(strip.rect().contains(strip.token_rect(i)) for i in range(shown)), width
        last = strip.token_rect(shown - 1)
        assert last.right() + 8 + fm.horizontalAdvance(f"… {more} more") <= width - 2, width



def test_token_boxes_are_measured_at_the_strips_font(qtbot):
    """Each box is as wide as its label at the strip's font: another font (a larger UI font, set
    while the app runs) measures the labels again rather than reuse the last font's widths."""
    from attnviz.ui.views.tokens import TokenStrip

    words = ["The", "keys", "to", "the", "cabinet", "keys"]
    strip = TokenStrip()
    qtbot.addWidget(strip)
    strip.resize(900, 200)

    def widths():
        strip.set_tokens(words, [False] * len(words), None)  # (hidden: laid out at once)
        return [strip.token_rect(i).width() for i in range(len(words))]

    fm = strip.fontMetrics()
    assert widths() == [fm.horizontalAdvance(w) + 10 for w in words]
    font = strip.font()
    font.setPointSizeF(font.pointSizeF() * 2)
    strip.setFont(font)
    big = strip.fontMetrics()
    assert widths() == [big.horizontalAdvance(w) + 10 for w in words]
    assert big.horizontalAdvance("cabinet") > fm.horizontalAdvance("cabinet")

@pytest.fixture
def window(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from attnviz.ui.app import create_window

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = create_window(model="all-MiniLM-L6-v2", settings=settings, panels=())
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None, timeout=30000)
    yield w
    w.worker.wait_idle()


def test_open_view_starts_where_the_last_export_went(window, qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    from attnviz.ui.export import ExportDialog

    out = tmp_path / "exports"
    out.mkdir()
    window.state.set_focus(0, 1)
    dlg = ExportDialog(window.state, window, window.settings)  # as File > Export opens it
    qtbot.addWidget(dlg)
    dlg.format.setCurrentIndex(dlg.format.findData("png"))
    dlg.width_box.setValue(400)
    dlg.path_edit.setText(str(out / "head.png"))
    assert dlg.do_export()
    asked = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        staticmethod(lambda *a, **k: asked.append(a) or ("", "")))
    window.open_view_dialog()
    assert asked and asked[0][2] == str(out.resolve())  # not "" (the folder it was started from)


def test_layer_box_counts_from_zero_like_the_head_titles(window, qtbot):
    from PySide6.QtCore import Qt

    assert window.state.n_layer == 6
    assert widget(window, "layer_spin").text() == "Layer 0 (0–5)"
    qtbot.keyClick(window.grid, Qt.Key.Key_PageDown)  # the second of six layers
    assert widget(window, "layer_spin").text() == "Layer 1 (0–5)"  # not "Layer 1 / 5"
    assert window.grid.titles()[0].startswith("L1 H0")
    assert "6 layers" in widget(window, "layer_spin").toolTip()


@pytest.fixture
def roles_panel(qtbot, minilm):
    from attnviz.ui.app import assemble
    from attnviz.ui.panels.roles_panel import RolesPanel

    st, worker = assemble()
    panel = RolesPanel(st)
    qtbot.addWidget(panel)
    panel.resize(420, 800)
    panel.show()
    st.set_model(minilm)
    st.set_text(TEXT)
    qtbot.waitUntil(lambda: st.head_scores is not None and not st.scores_stale, timeout=30000)
    qtbot.waitUntil(lambda: panel.overview.map.rowCount() == 6, timeout=WAIT)
    yield panel
    worker.wait_idle()


def test_roles_legend_never_breaks_inside_a_swatch(roles_panel):
    import re

    swatches = re.findall(r"<span[^>]*>(.*?)</span>", roles_panel.overview.legend.text())
    assert len(swatches) == 7
    assert all(" " not in s for s in swatches), swatches  # only &nbsp; inside: "dup = / duplicate"
    texts = [s.replace("&nbsp;", " ").strip() for s in swatches]
    assert "dup = duplicate" in texts and "sink" in texts  # not "sink = sink"


def test_roles_overview_fills_its_box(roles_panel, qtbot):
    ov = roles_panel.overview.map
    for width, height in ((420, 800), (600, 700)):
        roles_panel.resize(width, height)

        def filled():
            vp = ov.viewport()
            rows = sum(ov.rowHeight(r) for r in range(ov.rowCount()))
            cols = sum(ov.columnWidth(c) for c in range(ov.columnCount()))
            assert rows >= vp.height() - ov.rowCount() and cols >= vp.width() - ov.columnCount()
            # and no label is cut short ("pr…") to get there
            assert all(ov.columnWidth(c) >= ov.sizeHintForColumn(c) for c in range(ov.columnCount()))

        qtbot.waitUntil(filled, timeout=WAIT)  # (the table refits from the event loop)
