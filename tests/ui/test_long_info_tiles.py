"""The long view's line above the panes says what each pixel is: of the large pane, and of the
tiles too where they pool blocks of tokens while the pane shows exact weights (never 'exact weights'
alone over tiles of block maxima), and the exported picture's title says what the line says."""

from attnviz.ui.views.long_view import LongView
from windows import WAIT, long_view_shown

TEXT = "The cat sat on the mat near the old red door. " * 36


def test_the_info_line_names_the_tiles_blocks(window, qtbot):
    lg = long_view_shown(window, qtbot, TEXT, (1600, 1000))
    view = window.findChild(LongView)
    text = view.info.text()
    assert lg.pane.exact and not lg.tiles.exact, (lg.pane.values.shape, lg.tiles.values.shape, lg.run.patterns.T)
    assert text.endswith(f"· exact weights (the tiles: block max of blocks of up to "
                         f"{lg.tiles.cell_tokens(0)}×{lg.tiles.cell_tokens(1)} tokens)"), text
    # the exported picture's title says the same (it said "block max" over the exact weights)
    qtbot.waitUntil(lambda: view.picture() is not None, timeout=WAIT)
    assert view.picture().title().split(" · ")[-1] == text.split(" · ")[-1]
    window.worker.wait_idle()


def test_the_info_line_shows_all_of_its_text_in_a_narrow_window(window, qtbot):
    """In a window of 1100 pixels the info line's words all show (it wraps onto its second line
    rather than cutting '(the tiles: …)' at the view's right edge), and its tooltip holds it all."""
    from PySide6.QtCore import Qt

    long_view_shown(window, qtbot, TEXT, (1100, 860))
    info = window.findChild(LongView).info
    qtbot.waitUntil(lambda: "(the tiles:" in info.text(), timeout=WAIT)
    room = info.contentsRect()
    needed = info.fontMetrics().boundingRect(room, int(Qt.TextFlag.TextWordWrap), info.text())
    assert needed.height() <= room.height() and needed.width() <= room.width(), (needed, room)
    assert info.fontMetrics().horizontalAdvance(info.text()) > room.width()  # (it needs both lines)
    assert info.toolTip() == info.text()
    window.worker.wait_idle()


def _lines_needed(label, text) -> int:
    from PySide6.QtCore import QRect, Qt

    fm, room = label.fontMetrics(), label.contentsRect()
    need = fm.boundingRect(QRect(0, 0, room.width(), 1 << 20), int(Qt.TextFlag.TextWordWrap), text)
    return round(need.height() / fm.lineSpacing())


def test_a_cut_texts_info_line_reads_whole_and_the_key_strip_cuts_at_a_word(window, qtbot):
    """At 1024 x 700, a text cut to the model's positions: the info line, its two lines saying so,
    shows all of its words; the key strip under the large pane shows whole lines, its
    last word followed by "…", never a sliver of a third line."""
    long_view_shown(window, qtbot, "The cat sat on the mat near the old red door. " * 60, (1024, 700))
    view = window.findChild(LongView)
    info, strip = view.info, view.key_strip
    qtbot.waitUntil(lambda: "the model's positions" in info.full, timeout=WAIT)
    assert window.state.long.run.result.truncated
    assert info.full.startswith("Long text: its first 511 and [SEP] of ")  # [CLS], 510 of the text's, [SEP]
    assert "the model's positions" in info.text() and info.text() == info.toolTip()
    assert _lines_needed(info, info.text()) * info.fontMetrics().lineSpacing() <= info.contentsRect().height()
    shown = strip.text()
    assert shown.startswith("keys 0..") and shown.endswith(" …")
    assert _lines_needed(strip, shown) * strip.fontMetrics().lineSpacing() <= strip.contentsRect().height()
    window.worker.wait_idle()


def test_the_views_under_the_info_line_keep_their_place_for_a_cut_text(window, qtbot):
    """At 1024 x 700 the info line of a text cut to the model's positions says so in its two lines,
    as one of an uncut text does: the tiles and the large pane under it stay where they were in
    the long view, their tops as far under the line's as before (the longer token strip above the
    view may make the whole view shorter)."""
    from PySide6.QtCore import QPoint

    view = window.findChild(LongView)

    def places():
        return [w.mapTo(view, QPoint(0, 0)).y() for w in (view.info, view.tiles, view.pane)] + [view.info.height()]

    long_view_shown(window, qtbot, TEXT, (1024, 700))
    qtbot.waitUntil(lambda: view.info.full.startswith("Long text: ") and "positions" not in view.info.full,
                    timeout=WAIT)
    before = places()
    long_view_shown(window, qtbot, "The cat sat on the mat near the old red door. " * 60, (1024, 700))
    qtbot.waitUntil(lambda: "the model's positions" in view.info.full, timeout=WAIT)
    qtbot.waitUntil(lambda: places() == before, timeout=2000)
    assert "the model's positions" in view.info.text()  # (the cut shows, not only in the tooltip)
    window.worker.wait_idle()
