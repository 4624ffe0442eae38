"""What a keystroke paints, checked in painted pixels and visible text: the work a keystroke skips
(the colour bar's title set again, the bands blended at each paint)
never leaves a stale or wrong picture. The grid's and the focused head's colour bars follow each
text's limits, each scale's title and the colormap, the KV-group bands paint as their tint laid over the background, and the edits of one pass
of the event loop run once, that run on its way before the sentence box repaints."""

import shutil
import string
from pathlib import Path

import pytest
from PySide6.QtCore import QPointF, QRect
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.figures.style import BACKGROUND, group_color
from attnviz.ui.views.grid import BAND_ALPHA
from tiny import FIXTURES, tiny_text_model
from windows import WAIT, drain_events, open_window, wait_for_text, widget


def _bar_picture(g) -> QImage:
    """The colour bar as painted in the grid's view (its gradient, ticks and title)."""
    rect = g.gw.mapFromScene(g.cbar.sceneBoundingRect()).boundingRect()
    return g.gw.viewport().grab(rect.intersected(g.gw.viewport().rect())).toImage()


def _bar_shown(g) -> tuple[float, float]:
    lo, hi = g.cbar.levels()
    return round(float(lo), 3), round(float(hi), 3)


@pytest.fixture
def gqa_window(qtbot, tmp_path):
    """The window on a tiny decoder: 8 query heads reading 2 KV heads, random weights (its
    patterns' largest weights differ from text to text)."""
    folder = tiny_text_model(tmp_path / "gqa")
    w = open_window(qtbot, tmp_path / "s.ini", model=str(folder), text="the cat sat")
    yield w
    w.worker.wait_idle()


def tiny_encoder(folder: Path) -> Path:
    """The tiny BERT fixture with a letter-by-letter WordPiece tokenizer.json (written here): its
    random weights spread each row's attention, so the largest weight differs from text to text."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(FIXTURES / "bert" / name, folder / name)
    letters = string.ascii_lowercase
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters,
                                         *("##" + c for c in letters)])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_the_colour_bar_follows_each_texts_limits_and_title(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(tiny_encoder(tmp_path / "enc")), text="the cat sat")
    st, g = w.state, w.grid
    texts = ["the cat sat", "the cat sat on the mat", "a dog ran"]
    tops, pictures = [], []
    for text in texts:
        w.set_text(text)
        qtbot.waitUntil(lambda: g.drawn is st.result and st.result.text == text, timeout=WAIT)
        top = round(st.shown().shared_top(), 3)
        assert _bar_shown(g) == (0.0, top)  # the bar's limits are this text's, not the last one's
        assert g.cbar.getAxis("right").labelText == "attention weight"
        tops.append(top)
        pictures.append(_bar_picture(g))
    assert len(set(tops)) == len(tops), f"the texts must give different limits to test this: {tops}"
    assert pictures[0] != pictures[1] != pictures[2]  # the painted ticks follow the limits

    # the first text again paints the first text's bar again, pixel for pixel
    w.set_text(texts[0])
    qtbot.waitUntil(lambda: g.drawn is st.result and st.result.text == texts[0], timeout=WAIT)
    assert _bar_shown(g) == (0.0, tops[0])
    assert _bar_picture(g) == pictures[0]

    # per-head scale: limits 0..1 and another title, painted; back to shared: the first bar again
    st.set_scale_mode("per-head")
    qtbot.waitUntil(lambda: _bar_shown(g) == (0.0, 1.0), timeout=WAIT)
    assert g.cbar.getAxis("right").labelText == "weight \u00f7 head max"
    assert _bar_picture(g) not in pictures
    st.set_scale_mode("shared")
    qtbot.waitUntil(lambda: _bar_shown(g) == (0.0, tops[0]), timeout=WAIT)
    assert g.cbar.getAxis("right").labelText == "attention weight"
    assert _bar_picture(g) == pictures[0]
    w.worker.wait_idle()


def test_the_focused_heads_colour_bar_follows_each_text_and_colormap(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(tiny_encoder(tmp_path / "enc")), text="the cat sat")
    st, f = w.state, w.focus_view
    w.focus_dock.show()
    w.focus_dock.raise_()
    st.set_focus(1, 2)
    texts = ["the cat sat", "the cat sat on the mat", "a dog ran"]

    def shown_bar():
        lo, hi = f.cbar.levels()
        return float(lo), float(hi)

    def picture():
        drain_events()  # the view's layout settles (its axes' sizes follow their new ticks)
        rect = f.gw.mapFromScene(f.cbar.sceneBoundingRect()).boundingRect()
        return f.gw.viewport().grab(rect.intersected(f.gw.viewport().rect())).toImage()

    # each text twice: the bar's pictures are taken the second time, once the dock has its size
    # (the bar's title sits off its middle until the view is laid out again after its first show)
    for _ in range(2):
        tops, pictures = [], []
        for text in texts:
            w.set_text(text)
            qtbot.waitUntil(lambda: st.result is not None and st.result.text == text, timeout=WAIT)
            top = float(st.shown().tops(st.scale_mode, [1], [2])[0, 0])
            qtbot.waitUntil(lambda: shown_bar() == (0.0, top), timeout=WAIT)  # this text's head's top
            assert f.cbar.getAxis("right").labelText == "attention weight"
            tops.append(top)
            pictures.append(picture())
    assert len(set(tops)) == len(tops), f"the texts must give different limits to test this: {tops}"
    assert pictures[0] != pictures[1] != pictures[2]
    w.set_text(texts[0])
    qtbot.waitUntil(lambda: shown_bar() == (0.0, tops[0]), timeout=WAIT)
    assert picture() == pictures[0]
    # another colormap: the bar's colours change, and come back with the first one
    first = st.colormap
    st.set_colormap("inferno" if first != "inferno" else "viridis")
    qtbot.waitUntil(lambda: picture() != pictures[0], timeout=WAIT)
    st.set_colormap(first)
    qtbot.waitUntil(lambda: picture() == pictures[0], timeout=WAIT)
    w.worker.wait_idle()


def _blended(color: str) -> QColor:
    """`color` at the bands' alpha laid over the background, blended by a painter of its own."""
    tint = QColor(color)
    tint.setAlpha(BAND_ALPHA)
    img = QImage(4, 4, QImage.Format.Format_RGB32)
    img.fill(QColor(BACKGROUND))
    p = QPainter(img)
    p.fillRect(QRect(0, 0, 4, 4), tint)
    p.end()
    return img.pixelColor(2, 2)


def test_kv_bands_paint_as_their_tint_over_the_background(gqa_window):
    w = gqa_window
    g = w.grid
    assert w.state.view_mode == "layer" and w.state.result.kv_group.tolist() == [0] * 4 + [1] * 4
    img = g.gw.viewport().grab().toImage()
    lo = g.layout_
    seen = set()
    for i, (layer, head) in enumerate(lo.heads):
        group = int(w.state.result.kv_group[head])
        # the band's strip left of the tile's first column, halfway down the tile: band, no tile
        pos = g.gw.mapFromScene(g.vb.mapViewToScene(QPointF(lo.x0[i] - 0.2, lo.y0[i] + lo.T / 2)))
        if i % lo.ncols and int(w.state.result.kv_group[lo.heads[i - 1][1]]) == group:
            continue  # a tile after one of its own group: the strip left of it is the gap between them
        c = img.pixelColor(pos.x(), pos.y())
        assert c == _blended(group_color(group)), (i, c.name(), _blended(group_color(group)).name())
        seen.add(group)
    assert seen == {0, 1}
    # the background outside every band stays the background
    assert img.pixelColor(1, 1) == QColor(BACKGROUND)


def test_one_pass_of_edits_makes_one_run(window, qtbot):
    """A replace's remove and insert (one pass of the event loop) run the text once, the new text."""
    st, worker = window.state, window.worker
    runs = []
    st.sigResultChanged.connect(lambda r: r is not None and runs.append(r.text))
    cursor = window.text_box.textCursor()
    cursor.select(cursor.SelectionType.Document)
    cursor.beginEditBlock()
    cursor.removeSelectedText()
    cursor.insertText("The cabinet is open.")
    cursor.endEditBlock()
    window.text_box.setPlainText("The cabinet is closed.")
    wait_for_text(qtbot, window, "The cabinet is closed.")
    worker.wait_idle()
    qtbot.waitUntil(lambda: runs and runs[-1] == "The cabinet is closed.", timeout=WAIT)
    assert runs == ["The cabinet is closed."]


def test_a_keystrokes_run_is_on_its_way_before_the_sentence_box_repaints(window, qtbot):
    """The run of a typed letter is submitted as the key's events end, ahead of the box's repaint
    (a paint between would delay the run), and the box shows the letter, the grid its result."""
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtTest import QTest

    worker, box = window.worker, widget(window, "sentence_box")
    order = []

    class Paints(QObject):
        def eventFilter(self, obj, ev):
            if ev.type() == QEvent.Type.Paint:
                order.append("paint")
            return False

    def submit(kind, *args, **kwargs):
        if kind == "compute":
            order.append("run")
        return type(worker).submit(worker, kind, *args, **kwargs)

    paints = Paints()
    box.viewport().installEventFilter(paints)
    worker.submit = submit
    text = window.state.text
    box.setFocus()
    box.moveCursor(box.textCursor().MoveOperation.End)
    drain_events()
    order.clear()
    QTest.keyClick(box, "s")
    qtbot.waitUntil(lambda: "paint" in order and "run" in order, timeout=WAIT)
    assert order.index("run") < order.index("paint"), order
    wait_for_text(qtbot, window, text + "s")
    assert box.toPlainText() == text + "s"
    qtbot.waitUntil(lambda: window.grid.drawn is window.state.result, timeout=WAIT)


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def test_kv_bands_never_overlap_so_each_pixel_is_one_tint_over_the_background():
    """The bands paint opaque (their tint blended over the background once): right only where no
    band lies over another, at every text length, in both views."""
    from attnviz.engine.computing.layers import kv_group
    from attnviz.ui.views.mosaic import kv_segments, make_layout, view_geometry

    for n_head, n_kv in ((9, 3), (8, 2), (16, 4), (6, 3), (4, 1)):
        groups = kv_group(n_head, n_kv)
        for T in (1, 2, 3, 5, 8, 13, 22, 40, 97, 300):
            for mode in ("layer", "all"):
                geo = view_geometry(mode, 30, n_head, n_head // n_kv, T, 940, 660)
                lo = make_layout(mode, 30, 29, groups, T, geo.ncols, geo.pool, geo.bands, geo.tile_px)
                segs = kv_segments(lo, groups)
                assert segs and all(xl < xr and yt < yb for xl, xr, yt, yb, _ in segs)
                for i, a in enumerate(segs):
                    assert not any(_overlap(a, b) for b in segs[i + 1:]), (n_head, n_kv, T, mode, a)


def test_the_focused_heads_cells_paint_their_weights_colours(qtbot, tmp_path):
    """Each cell of the focused head, at its centre, is its weight's colour on the colour bar's
    scale, after each keystroke (the head is drawn as ARGB, as the grid's mosaic)."""
    import numpy as np
    import pyqtgraph as pg

    w = open_window(qtbot, tmp_path / "s.ini", model=str(tiny_encoder(tmp_path / "enc")), text="the cat")
    st, f = w.state, w.focus_view
    w.focus_dock.show()
    w.focus_dock.raise_()
    st.set_focus(1, 2)
    cmap = pg.colormap.get(st.colormap)
    for text in ("the cat", "the cat sat"):
        w.set_text(text)
        qtbot.waitUntil(lambda: st.result is not None and st.result.text == text, timeout=WAIT)
        weights = st.result.attentions[1, 2]  # [T, T]
        top = float(st.shown().tops(st.scale_mode, [1], [2])[0, 0])
        T = len(weights)

        def painted():
            drain_events()
            img = f.gw.viewport().grab().toImage()
            for q in range(T):
                for k in range(T):
                    p = f.gw.mapFromScene(f.vb.mapViewToScene(QPointF(k + 0.5, q + 0.5)))
                    c = img.pixelColor(p.x(), p.y())
                    want = cmap.map(float(weights[q, k]) / top, mode="byte")[:3]
                    if np.abs(np.array([c.red(), c.green(), c.blue()]) - want).max() > 4:
                        return False
            return True

        qtbot.waitUntil(painted, timeout=WAIT)
    w.worker.wait_idle()
