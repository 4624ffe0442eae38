"""A grid title too narrow for its badge keeps what the badge says: the layer view at 1000 x 650
abbreviates every badge of the row ("H3 sink (p)" for "L1 H3  sink (probe)") rather than cut it
("H3  sink (pr…", "H6  inducti…"); where even that is too wide, the role is cut and the probe's
note stays, so a label from the probe never reads as one of the typed text. The whole title is
its tooltip."""

from PySide6.QtWidgets import QGraphicsSimpleTextItem

from attnviz.figures.roles import short_badge
from windows import drain_events, toy_window

TEXT = ("violet anchor nine tulip gravel comet lantern otter violet anchor nine tulip gravel comet "
        "lantern otter")


def shown_titles(w) -> list[tuple[str, str]]:
    """(the text drawn, the whole title) of each head title in the grid, row by row, left to right."""
    names = set(w.grid.titles())
    items = [t for t in w.grid.gw.scene().items() if isinstance(t, QGraphicsSimpleTextItem)
             and t.isVisible() and getattr(t, "full", None) in names]
    return [(t.text(), t.full) for t in sorted(items, key=lambda t: (round(t.scenePos().y()), t.scenePos().x()))]


def test_a_narrow_title_abbreviates_its_badge_and_keeps_the_probe_note(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "a.ini", TEXT)
    w.resize(1000, 650)
    w.state.set_layer(1)
    for source, note in (("text", ""), ("probe", " (p)")):
        w.state.set_role_options(source=source)
        qtbot.waitUntil(lambda: w.state.head_labels is not None and all(
            (label.endswith(" (probe)") == (source == "probe")) for label in w.state.head_labels[1]),
            timeout=60000)
        w.worker.wait_idle()
        drain_events()
        drain_events()
        titles = shown_titles(w)
        assert len(titles) == w.state.model.config.n_head
        badges = w.state.head_labels[1]
        assert any(text != full for text, full in titles)  # (too narrow for every title whole)
        for h, (text, full) in enumerate(titles):
            assert full == f"L1 H{h}  {badges[h]}"
            if source == "text":  # (the toy's roles abbreviated fit its tiles)
                assert text == f"H{h} {short_badge(badges[h])}", titles
            else:
                assert text.startswith(f"H{h} ") and text.endswith(note), titles
                assert text == f"H{h} {short_badge(badges[h])}" or "\u2026 (p)" in text, titles


def test_a_title_too_narrow_for_its_probe_note_keeps_the_head_not_a_bare_role(qtbot):
    """At every width a probe's title shows its role with the note, or no role at all: never a
    role cut free of its "(p)", and never the note without the head's name before it."""
    from PySide6.QtGui import QFont, QFontMetricsF

    from attnviz.figures.titles import cut_title

    font = QFont()
    font.setPointSize(8)
    fm = QFontMetricsF(font)
    seen = set()
    for width in range(4, 90):
        shown = cut_title(fm, "H12 ind (p)", width)
        seen.add(shown)
        assert fm.horizontalAdvance(shown) <= width
        if shown.endswith(" (p)"):
            assert shown.startswith(("H12 ", "H12…")), shown
        else:
            assert shown in ("", "…", "H…", "H1…", "H12", "H12…"), shown
    assert {"H12…", "H12 ind (p)"} <= seen
