"""The token strip: the tokens as the model reads them, a view of AppState's result and query;
clicking a token picks (or clears) the query through the state's setter. While the grid shows a
preview (the running text's first layers), the strip shows that text's tokens too, and a click
waits for the whole result."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter, QRegion
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from attnviz.engine.reading.token_text import isolated, quoted
from attnviz.figures.style import FOCUS
from attnviz.ui.views.fields import plain_tip


class TokenStrip(QWidget):
    """The tokens as the model sees them, painted as boxes in wrapped lines (a rich-text label is
    slow to lay out at every result); clicking a token picks it as the query.

    The strip's height follows its line count only once results pause (RESIZE_DELAY_MS): a height
    change re-lays out the window and repaints the whole grid, which would
    stall typing each time the text wraps. Until then a strip with too few lines shows the newest
    tokens (the ones being typed), after a "… N" box counting the tokens before them."""

    sigClicked = Signal(int)
    MAX_LINES = 4
    RESIZE_DELAY_MS = 300
    COLORS = ("#fde7c8", "#d6e4ff")  # alternating token backgrounds
    SPECIAL, QUERY = "#e3e3e3", FOCUS  # the query token: the focus colour, as in the focus view

    def __init__(self, state=None, parent: QWidget | None = None):
        """With `state` (AppState) the strip follows its result and query by itself, and a click
        toggles the state's query; without, it is fed through set_tokens / set_query."""
        super().__init__(parent)
        self.state = state
        self.labels: list[str] = []
        self.special: list[bool] = []
        self.query: int | None = None
        self._rects: list[QRect] = []  # boxes of tokens _first, _first + 1, ...
        self._first = 0  # tokens before it are summed up in the "… N" box (_head_rect)
        self._head_rect: QRect | None = None
        self._more = 0  # tokens that did not fit in MAX_LINES
        self.previewing = False  # the tokens are a preview's (the grid shows the running text's first layers)
        self._width_cache: tuple = (None, {})  # (font key, label -> box width): _box_widths
        self._height = self._layout(400, self.MAX_LINES)
        self._resize_timer = QTimer(self)
        self._resize_timer.setSingleShot(True)
        self._resize_timer.setInterval(self.RESIZE_DELAY_MS)
        self._resize_timer.timeout.connect(self._fit_height)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        if state is not None:  # the text's tokens: the dense result's, or a long run's
            state.sigTextResultChanged.connect(self._follow)
            state.sigQueryChanged.connect(self._follow)
            state.sigPreviewChanged.connect(self._follow)
            self.sigClicked.connect(state.toggle_query)
            self._follow()

    def _follow(self, *_) -> None:  # AppState -> the strip
        st = self.state
        preview = st.shown_preview()  # the text the grid shows, before its result
        self.previewing = preview is not None
        r, q = (preview.result, st.preview_query()) if preview is not None else (st.text_result, st.query_pos)
        if r is None:
            self.set_tokens([], [], None)
        elif self.labels is not r.labels and self.labels != r.labels:
            self.set_tokens(r.labels, [a == b for a, b in r.offsets], q)
        else:
            if self.labels is not r.labels:  # the same tokens (a result after its preview): no new layout
                self.labels, self.special = r.labels, [a == b for a, b in r.offsets]
            self.set_query(q)

    def set_tokens(self, labels: list[str], special: list[bool], query: int | None) -> None:
        before = self._picture()
        self.labels, self.special, self.query = labels, special, query
        if self.isVisible() and self.height() > 0:
            lines = max(1, (self.height() - 3) // self._line_step())
            full = self._wrap(self.width(), self.MAX_LINES)
            if full[0] != self.height():
                self._resize_timer.start()  # (re)started per result: resize once typing pauses
            if full[4] == 0 and full[0] <= self.height():
                # every token fits the strip's lines: the tail layout is this one (wrapped once)
                _, self._rects, self._first, self._head_rect, self._more = full
            else:
                self._layout(self.width(), lines, tail=True)
        else:
            self._height = self._layout(self.width(), self.MAX_LINES)
            self.updateGeometry()
        self._repaint(before)

    def set_query(self, query: int | None) -> None:
        before = self._picture()
        self.query = query
        self._repaint(before)

    def _box_colors(self, i: int) -> tuple[str, str]:  # token i's (background, text colour)
        bg = self.QUERY if i == self.query else self.SPECIAL if self.special[i] else self.COLORS[i % 2]
        return bg, "#666666" if self.special[i] and i != self.query else "#000000"

    def _picture(self) -> tuple:
        """What paintEvent draws from: (its frame: whether there are tokens, the "… N" box, the
        "… N more" count and where it goes), the boxes, labels, special flags and query."""
        rects = self._rects
        frame = (bool(self.labels), self._head_rect and self._head_rect.getRect(), self._first,
                 self._more, self._more and rects and rects[-1].getRect())
        return frame, rects, self.labels, self.special, self.query

    def _repaint(self, before: tuple) -> None:
        """Repaint where the picture differs from `before` (_picture's): the boxes that changed,
        where they were and where they are now (a keystroke: its last one or two tokens), or the
        whole strip where its frame changed."""
        frame, rects, labels, special, query = before
        if frame != self._picture()[0] or not self.labels:
            self.update()
            return
        region, first = QRegion(), self._first
        for k in range(max(len(rects), len(self._rects))):
            i = first + k
            old = rects[k] if k < len(rects) else None
            new = self._rects[k] if k < len(self._rects) else None
            if (old is None or new is None or old != new or labels[i] != self.labels[i]
                    or special[i] != self.special[i] or (i == query) != (i == self.query)):
                for r in (old, new):
                    if r is not None:
                        region += r
        if not region.isEmpty():
            self.update(region)

    def _fit_height(self) -> None:
        # only the wanted height: the boxes are laid out for the height the strip gets (resizeEvent)
        self._height = self._wrap(self.width(), self.MAX_LINES)[0]
        self.updateGeometry()

    def _line_step(self) -> int:
        return self.fontMetrics().height() + 4 + 3

    def _layout(self, width: int, max_lines: int, tail: bool = False) -> int:
        """Lay the boxes out (see _wrap) and keep that layout for painting; returns its height."""
        height, self._rects, self._first, self._head_rect, self._more = self._wrap(width, max_lines, tail)
        return height

    def _box_widths(self, fm) -> list[int]:
        """Each token's box width at the strip's font; a label measured once per font (a keystroke
        lays the strip out twice, and its tokens are mostly the last text's)."""
        key = fm.height(), fm.averageCharWidth(), self.font().key()
        if self._width_cache[0] != key:
            self._width_cache = (key, {})
        known = self._width_cache[1]
        out = []
        for label in self.labels:
            w = known.get(label)
            if w is None:
                if len(known) > 4096:  # a long text's tokens come and go: keep the cache small
                    known.clear()
                w = known[label] = fm.horizontalAdvance(label or " ") + 10
            out.append(w)
        return out

    def _wrap(self, width: int, max_lines: int, tail: bool = False):
        """Wrap the token boxes into at most max_lines lines: (height, rects, first token shown,
        "… N" box or None, tokens left out at the end). With tail, the lines are filled from the last
        token backwards, so the newest tokens stay shown."""
        fm = self.fontMetrics()
        h = fm.height() + 4
        widths = self._box_widths(fm)
        if tail and max_lines < self.MAX_LINES and self._lines_needed(widths, width) > max_lines:
            # backwards: the first shown line starts with a "… N" box for the tokens before it
            lines: list[list[int]] = [[]]
            x = width - 2
            for i in range(len(widths) - 1, -1, -1):
                head_w = fm.horizontalAdvance(f"… {i + 1}") + 10 + 3 if len(lines) == max_lines else 0
                if x - widths[i] - head_w < 2 and lines[-1]:
                    if len(lines) == max_lines:
                        break
                    lines.append([])
                    x = width - 2
                lines[-1].insert(0, i)
                x -= widths[i] + 3
            lines.reverse()
            first = lines[0][0]
            rects = []
            y = 2
            head = None
            for n, line in enumerate(lines):
                x = 2
                if n == 0:
                    w = fm.horizontalAdvance(f"… {first}") + 10
                    head = QRect(x, y, w, h)
                    x += w + 3
                for i in line:
                    rects.append(QRect(x, y, widths[i], h))
                    x += widths[i] + 3
                y += h + 3
            return y + 1, rects, first, head, 0
        x = y = 2
        lines_used = 1
        more = 0
        rects = []
        for i, w in enumerate(widths):
            if x + w > width - 2 and x > 2:
                if lines_used == max_lines:
                    more = len(widths) - i
                    break
                lines_used += 1
                x, y = 2, y + h + 3
            rects.append(QRect(x, y, w, h))
            x += w + 3
        # the "… N more" count is drawn after the last box: give it room inside the width
        while more and len(rects) > 1 and (
                rects[-1].right() + 8 + fm.horizontalAdvance(f"… {more} more") > width - 2):
            rects.pop()
            more += 1
        return y + h + 4, rects, 0, None, more

    @staticmethod
    def _lines_needed(widths: list[int], width: int) -> int:
        x, lines = 2, 1
        for w in widths:
            if x + w > width - 2 and x > 2:
                lines += 1
                x = 2
            x += w + 3
        return lines

    def token_rect(self, i: int) -> QRect:
        return self._rects[i - self._first]

    @property
    def more(self) -> int:
        """Tokens after the last box that did not fit: the N of the "… N more" label (0: none)."""
        return self._more

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._wrap(width, self.MAX_LINES)[0]

    def sizeHint(self) -> QSize:
        return QSize(400, self._height)

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        lines = max(1, (self.height() - 3) // self._line_step())
        self._layout(self.width(), min(lines, self.MAX_LINES), tail=True)

    def paintEvent(self, ev) -> None:
        p, region = QPainter(self), ev.region()
        fm = self.fontMetrics()
        if not self.labels:
            p.setPen(QColor("#777777"))
            p.drawText(4, fm.ascent() + 4, "no tokens")
            return
        if self._head_rect is not None:
            p.fillRect(self._head_rect, QColor(self.SPECIAL))
            p.setPen(QColor("#555555"))
            p.drawText(self._head_rect, Qt.AlignmentFlag.AlignCenter, f"… {self._first}")
        for j, r in enumerate(self._rects):
            if not region.intersects(r):  # (a keystroke repaints the boxes it changed: _repaint)
                continue
            i = self._first + j
            bg, pen = self._box_colors(i)
            p.fillRect(r, QColor(bg))
            p.setPen(QColor(pen))
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, self.labels[i])
        if self._more:
            p.setPen(QColor("#555555"))
            last = self._rects[-1]
            p.drawText(last.right() + 8, last.top() + fm.ascent() + 2, f"… {self._more} more")

    def index_at(self, pos) -> int | None:
        return next((self._first + j for j, r in enumerate(self._rects) if r.contains(pos)), None)

    def mousePressEvent(self, ev) -> None:
        i = self.index_at(ev.position().toPoint())
        if i is not None and not self.previewing:  # (a query is a position in the whole result)
            self.sigClicked.emit(i)

    def _piece(self, i: int) -> str:
        """`, piece 'Ġkeys', id 7` : the tokenizer's own piece and id behind label i."""
        r = self.state.result if self.state is not None else None
        if r is None or r.labels is not self.labels:
            return ""
        return f", piece {quoted(r.tokens[i])}, id {int(r.input_ids[i])}"

    def event(self, ev) -> bool:
        if ev.type() == QEvent.Type.ToolTip:
            i = self.index_at(ev.pos())
            click = ("the layers after the one shown are being computed" if self.previewing
                     else "click: show this query row in every head")
            text = f"#{i}: {quoted(isolated(self.labels[i]))}{self._piece(i)} ({click})" if i is not None else self.toolTip()
            QToolTip.showText(ev.globalPos(), plain_tip(text), self)
            return True
        return super().event(ev)
