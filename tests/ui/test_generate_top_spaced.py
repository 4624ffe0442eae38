"""Generate's top-10 at a 1024-pixel-wide window: each number column stands apart from the column
before it (the widest token and its probability, the model's and the draw's), as the label lays
its table out at the width it has."""

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument, QTextTable

from windows import IOI, TOY, WAIT, drain_events, open_window

GAP = 10  # pixels at least between a column's text and the next column's


def cell_boxes(label) -> list[list]:
    """Each row of the label's table as the label lays it out: per cell, (left, right) of its
    text in pixels, None for an empty cell."""
    doc = QTextDocument()
    doc.setDefaultFont(label.font())
    doc.setDocumentMargin(0)
    doc.setHtml(label.text())
    doc.setTextWidth(label.contentsRect().width())
    table = next(f for f in doc.rootFrame().childFrames() if isinstance(f, QTextTable))
    layout, rows = doc.documentLayout(), []
    for r in range(table.rows()):
        row = []
        for c in range(table.columns()):
            block = table.cellAt(r, c).firstCursorPosition().block()
            if not block.text():
                row.append(None)
                continue
            x = layout.blockBoundingRect(block).left()
            line = block.layout().lineAt(0).naturalTextRect()
            row.append((x + line.left(), x + line.right()))
        rows.append(row)
    return rows


def test_the_top_10s_columns_stand_apart_at_1024_pixels(qtbot, settings_path):
    w = open_window(qtbot, settings_path, model=TOY, text=IOI, panels=("generate",))
    w.resize(1024, 700)
    w.generate_dock.show()
    w.generate_dock.raise_()
    gen, panel = w.state.generation, w.generate_panel
    panel.n_spin.setValue(3)
    panel.temp_spin.setValue(0.8)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 3, timeout=WAIT)
    drain_events()
    assert w.width() == 1024
    for s in range(3):
        panel.slider.setValue(s)
        rows = cell_boxes(panel.top_label)
        assert len(rows) == 11 and len(rows[0]) == 4  # the header, then the top 10: token, model, draw
        for row in rows:
            texts = [box for box in row[1:] if box is not None]
            for before, after in zip(texts, texts[1:]):
                assert after[0] - before[1] >= GAP, (s, row)
        token_ends = max(row[1][1] for row in rows[1:])
        assert min(row[2][0] for row in rows) - token_ends >= GAP  # past the widest token
    w.worker.wait_idle()
