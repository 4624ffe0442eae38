"""The hover checks of tests/ui/test_hover_device_pixels.py, in a Python of their own at the device
pixel ratio its QT_SCALE_FACTOR gives (a running QApplication keeps its ratio): each check named
on the command line run in turn, their numbers printed as one line of JSON."""

import json
import math
import re
import sys
import types

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication, QWidget
from attnviz.figures.style import heat_positions, heat_table
from attnviz.ui.machinery.state import AppState
from attnviz.ui.views.focus import FocusView
from attnviz.ui.views.grid import HeatmapGrid

READ = re.compile(r"L0 H(\d+)  t(\d+) → t(\d+)  (\S+)")
NONE = Qt.KeyboardModifier.NoModifier


def settle():
    for _ in range(5):
        QApplication.sendPostedEvents()
        QApplication.processEvents()


def result(attn):
    labels = [f"t{i}" for i in range(attn.shape[-1])]
    return types.SimpleNamespace(attentions=attn, labels=labels, tokens=labels, text="x",
                                 offsets=[(i, i + 1) for i in range(len(labels))],
                                 kv_group=np.arange(attn.shape[1]))


def send(widget, kind, pos, button=Qt.MouseButton.NoButton, mods=NONE):
    ev = QMouseEvent(kind, pos, QPointF(widget.mapToGlobal(pos)), button,
                     button if kind == QEvent.Type.MouseButtonPress else Qt.MouseButton.NoButton, mods)
    QApplication.sendEvent(widget, ev)


def read(view, pos):
    send(view.gw.viewport(), QEvent.Type.MouseMove, pos)
    m = READ.match(view.hover_text)
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]), m[4])


def rgb(image, x, y):
    c = image.pixelColor(x, y)
    return c.red(), c.green(), c.blue()


def span(view, rect):  # the device pixels over a scene rect (a pixel in from its edges)
    box, dpr = view.gw.viewportTransform().mapRect(rect), view.gw.devicePixelRatioF()
    return (math.floor(box.left() * dpr) + 1, math.ceil(box.right() * dpr) - 1,
            math.floor(box.top() * dpr) + 1, math.ceil(box.bottom() * dpr) - 1)


def click(view, pos, button, mods=NONE):
    for kind in (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonRelease):
        send(view.gw.viewport(), kind, pos, button, mods)


def edges(view, x0, x1, y0, y1, row_differs, column_differs, most=12):
    # device pixels (x, y), both odd, on the last device row of a block (down the middle column)
    # or its last device column (along the middle row): the pointer's whole widget pixel there is
    # the next device pixel, in the next block
    dpr = view.gw.devicePixelRatioF()
    xm, ym, rows, columns = (x0 + x1) // 2 | 1, (y0 + y1) // 2 | 1, [], []
    for y in range(y0 | 1, y1 - 1, 2):
        a, b = read(view, QPointF(xm / dpr, y / dpr)), read(view, QPointF(xm / dpr, (y + 1) / dpr))
        if a and b and row_differs(a, b) and len(rows) < most:
            rows.append((xm, y))
    for x in range(x0 | 1, x1 - 1, 2):
        a, b = read(view, QPointF(x / dpr, ym / dpr)), read(view, QPointF((x + 1) / dpr, ym / dpr))
        if a and b and column_differs(a, b) and len(columns) < most:
            columns.append((x, ym))
    return rows + columns


def grid():
    st = AppState()
    g = HeatmapGrid(st)
    g.resize(900, 500)
    g.show()
    st.set_view_mode("layer")
    rng = np.random.default_rng(3)
    st.set_result(result(np.zeros((1, 4, 40, 40), np.float32)))
    settle()
    lo = g.layout_
    T = int(g.gw.viewportTransform().mapRect(g.img.mapRectToScene(QRectF(0, 0, lo.T, lo.T))).width() * 1.3)
    st.set_result(result((rng.random((1, 4, T, T)) ** 3).astype(np.float32)))
    settle()
    lo, dpr = g.layout_, g.gw.devicePixelRatioF()
    image = g.gw.viewport().grab().toImage()
    table, attn = heat_table(st.colormap), st.result.attentions
    tops = st.shown().tops(st.scale_mode, [0])[0]
    wrong, seen, clicks = [], 0, 0
    for i in range(len(lo.heads)):
        x0, x1, y0, y1 = span(g, g.img.mapRectToScene(QRectF(float(lo.x0[i]), float(lo.y0[i]), lo.T, lo.T)))
        for y in range(y0 + i, y1, 33):  # (rows of both parities, and every device pixel along each)
            for x in range(x0, x1):
                pos = QPointF(x / dpr, y / dpr)
                cell = read(g, pos)
                if cell is None:
                    continue
                h, q, k, _ = cell
                colour = tuple(int(c) for c in table[int(heat_positions(attn[0, h, q, k], tops[h]))][:3])
                if colour != rgb(image, x, y):
                    wrong.append((h, x, y, q, k))
                seen += 1
    import attnviz.ui.panels.ablation_panel as menus  # (the right click's menu: the cell it is for)
    menu_cells = []
    menus.head_menu = lambda st, layer, h, q, k, parent: menu_cells.append((h, q, k)) or types.SimpleNamespace(
        popup=lambda at: None)
    for i in range(2):
        box = span(g, g.img.mapRectToScene(QRectF(float(lo.x0[i]), float(lo.y0[i]), lo.T, lo.T)))
        for x, y in edges(g, *box, lambda a, b: a[1] // lo.pool != b[1] // lo.pool,
                          lambda a, b: a[2] // lo.pool != b[2] // lo.pool):
            pos = QPointF(x / dpr, y / dpr)
            h, q, k, _ = read(g, pos)
            click(g, pos, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier)  # the query
            click(g, pos, Qt.MouseButton.RightButton)
            clicks += 1
            if st.query_pos != q or menu_cells[-1:] != [(h, q, k)]:
                wrong.append(("click", x, y, (h, q, k), st.query_pos, menu_cells[-1:]))
            st.set_query(None)
    return {"dpr": dpr, "image_dpr": image.devicePixelRatio(), "pool": lo.pool, "seen": seen,
            "clicks": clicks, "wrong": wrong[:8], "n_wrong": len(wrong)}


def focus():
    st = AppState()
    st.set_result(result(np.eye(40, dtype=np.float32)[None, None]))
    fv = FocusView(st)
    fv.resize(420, 520)
    fv.show()
    st.set_focus(0, 0)
    settle()
    T = int(max(fv.vb.width(), fv.vb.height()) * 1.3)
    st.set_result(result(np.eye(T, dtype=np.float32)[None, None]))
    settle()
    dpr = fv.gw.devicePixelRatioF()
    image = fv.gw.viewport().grab().toImage()
    x0, x1, y0, y1 = span(fv, fv.img.sceneBoundingRect())
    wrong, seen, hot = [], 0, 0
    for y in range(y0, y1, 3):  # along the diagonal, four device pixels either side
        mid = x0 + (y + 0.5 - y0) * (x1 - x0) / (y1 - y0)
        for x in range(max(x0, math.floor(mid) - 4), min(x1, math.floor(mid) + 5)):
            m = READ.match(read(fv, QPointF(x / dpr, y / dpr)) and fv.hover_text or "")
            c = image.pixelColor(x, y)
            shows = c.red() > 200 and c.green() > 200 and c.blue() < 100  # viridis' yellow: weight 1
            names = m is not None and m[2] == m[3] and m[4] == "1.00"
            if m is None or shows != names:
                wrong.append((x, y, shows, fv.hover_text))
            seen += 1
            hot += shows
    clicked, clicks = [], 0  # the cell and button of each click (Why here? and the query hear it)
    fv.sigCellClicked.connect(lambda cell, button, at: clicked.append((*tuple(cell)[1:], button.name)))
    for x, y in edges(fv, x0, x1, y0, y1, lambda a, b: a[1] != b[1], lambda a, b: a[2] != b[2]):
        pos = QPointF(x / dpr, y / dpr)
        h, q, k, _ = read(fv, pos)
        click(fv, pos, Qt.MouseButton.LeftButton)
        clicks += 1
        if clicked[-1:] != [(h, q, k, "LeftButton")] or st.query_pos != q:
            wrong.append(("click", x, y, (h, q, k), clicked[-1:], st.query_pos))
        st.set_query(None)
        click(fv, pos, Qt.MouseButton.RightButton)  # (Why here?'s menu: the cell it is for)
        if clicked[-1:] != [(h, q, k, "RightButton")]:
            wrong.append(("right click", x, y, (h, q, k), clicked[-1:]))
    return {"dpr": dpr, "image_dpr": image.devicePixelRatio(), "pooled": bool(fv.picture.pooled),
            "seen": seen, "hot": hot, "clicks": clicks, "wrong": wrong[:8], "n_wrong": len(wrong)}


def dla():
    from attnviz.figures import headmap as fig
    from attnviz.ui.panels.dla_view import PAPER, HeadMapView

    rng = np.random.default_rng(5)
    hm = fig.HeadMap("DLA", rng.uniform(-1.0, 1.0, (7, 11)), "logit", np.arange(11) // 4,
                     ("MLP", rng.uniform(-1.0, 1.0, 7)), (("embed", 0.2), ("bias", -0.3)))
    view = HeadMapView(AppState())
    view.resize(361, 423)
    view.show()
    view.set_map(hm)
    settle()
    image, lay, dpr = view.grab().toImage(), view.lay, view.devicePixelRatioF()
    paper = PAPER.red(), PAPER.green(), PAPER.blue()
    values = {"head": lambda w: hm.values[w[1], w[2]], "column": lambda w: hm.column[1][w[1]],
              "extra": lambda w: hm.extras[w[1]][1]}
    wrong, seen = [], 0
    right = int(max(lay.x_column + lay.cell, *(r.right() for r in lay.extra_rects)) * dpr) + 2
    for y in range(int(lay.title_h * dpr), int(max(r.bottom() for r in lay.extra_rects) * dpr) + 2, 5):
        for x in range(int(lay.left * dpr) - 2, right):
            what = view.hit_at(x / dpr, y / dpr)
            c = image.pixelColor(x, y)
            got = c.red(), c.green(), c.blue()
            if what is None:
                bad = got != paper
            else:
                want = fig.colour(float(values[what[0]](what)), hm.limit)
                bad = (want.red(), want.green(), want.blue()) != got and (what[0] != "extra" or got == paper)
                seen += 1
            if bad:
                wrong.append((x, y, what, got))
    return {"dpr": dpr, "image_dpr": image.devicePixelRatio(), "seen": seen, "wrong": wrong[:8],
            "n_wrong": len(wrong)}


def hovered(widget, x, y):  # the widget's tooltip with the pointer on device pixel (x, y) of its window
    dpr, at = widget.devicePixelRatioF(), widget.mapTo(widget.window(), QPointF(0, 0))
    send(widget, QEvent.Type.MouseMove, QPointF(x / dpr - at.x(), y / dpr - at.y()))
    return widget.toolTip()


def hatch(x0, x1, y0, y1, lines):  # every device pixel of `lines` rows and as many columns, spread
    rows = {y0 + (2 * i + 1) * (y1 - y0) // (2 * lines) for i in range(lines)}
    columns = {x0 + (2 * i + 1) * (x1 - x0) // (2 * lines) for i in range(lines)}
    return sorted({(x, y) for y in rows for x in range(x0, x1)} | {(x, y) for x in columns for y in range(y0, y1)})


def around(widget, r, more=2):  # the device pixels of the window over widget rect r, `more` beyond
    dpr, at = widget.devicePixelRatioF(), widget.mapTo(widget.window(), QPointF(0, 0))
    box = r.translated(at)
    return (math.floor(box.left() * dpr) - more, math.ceil(box.right() * dpr) + more,
            math.floor(box.top() * dpr) - more, math.ceil(box.bottom() * dpr) + more)


def inside(widget, r, x, y):  # whether device pixel (x, y)'s middle lies in widget rect r
    dpr, at = widget.devicePixelRatioF(), widget.mapTo(widget.window(), QPointF(0, 0))
    return r.translated(at).contains(QPointF((x + 0.5) / dpr, (y + 0.5) / dpr))


class Bag:  # (weakly referable: the Compare panel holds its comparison and result weakly)
    def __init__(self, **kw):
        self.__dict__.update(kw)


class ModelA:  # model A as the Compare panel names it
    name, kv_group = "A", np.arange(4)


class Jobs(QObject):  # the Compare session the panel shows: model B open, one comparison in
    sigChanged, sigNumbers = Signal(), Signal()

    def __init__(self, c):
        super().__init__()
        self.comparison, self.mode, self.identity, self.note = c, "A", {"name": "B"}, ""
        self.active, self.loading, self.induction = True, None, None

    def set_mode(self, mode):
        self.mode = mode
        self.sigChanged.emit()

    def close(self):
        pass


def comparison(T):
    rng = np.random.default_rng(T)
    labels = [f"t{i}" for i in range(T)]
    doc = {"heads_jsd": rng.random((2, 4)).tolist(), "heads_jsd_max": rng.random((2, 4)).tolist(),
           "kld": rng.random(T).tolist(), "kld_stats": None, "same_top1": 0.0, "resid_cos": [],
           "flips": [{"position": t, "a_token": "a", "b_token": "b"} for t in range(T)]}  # (every cell framed)
    # (uniform weights: two neighbouring cells hardly ever share a colour)
    return Bag(result=Bag(labels=labels, tokens=labels, text="x", n_tokens=T), doc=doc, tops=None,
               a_attentions=rng.random((2, 4, T, T)).astype(np.float32),
               b_attentions=rng.random((2, 4, T, T)).astype(np.float32))


def compare_panel(T):
    from attnviz.ui.panels.compare_panel import ComparePanel
    st = AppState()
    st.model = ModelA()
    panel = ComparePanel(st, Jobs(comparison(T)))
    panel.resize(419, 1000)
    panel.show()
    settle()
    return st, panel


TILE = re.compile(r"L0 H(\d+)  't(\d+)' \u2192 't(\d+)'")


def tiles():
    from attnviz.figures import compare as F
    from attnviz.ui.views import grid_compare as GC
    st, panel = compare_panel(8)
    for _ in range(4):  # (the strip's rows take room from the tiles: a longer text, smaller tiles)
        side = int(panel.tile_rects[0].width())
        panel.jobs.comparison = c = comparison(2 * side - 1)  # pooled, each pixel a block of its own
        panel.jobs.sigChanged.emit()
        settle()
    T = c.result.n_tokens
    a, b = GC.sides(c, False)
    d, _ = GC.difference(a, b, 0)
    lim, weights = F.signed_limit(d), a.rows(0, 0, T)
    wrong, seen = [], 0
    for mode in ("A", "A-B"):
        panel.jobs.set_mode(mode)
        settle()
        image = panel.grab().toImage()  # (the window: the tiles at their offset in it)
        for r in (panel.tile_rects[0], panel.tile_rects[-1]):
            for x, y in hatch(*around(panel.tiles, r), 3):
                m = TILE.search(hovered(panel.tiles, x, y))
                if m is None:  # (paper there, or a pixel of the tile that names no cell)
                    if inside(panel.tiles, r, x, y) and rgb(image, x, y) != (255, 255, 255):
                        wrong.append((mode, x, y, None, rgb(image, x, y)))
                    continue
                h, q, k = map(int, m.groups())
                want = F.signed_rgb(d[h, q, k], lim) if mode == "A-B" else F.weight_rgb(weights[h, q, k], st.colormap)
                seen += 1
                if tuple(int(v) for v in want) != rgb(image, x, y):
                    wrong.append((mode, x, y, (h, q, k), rgb(image, x, y)))
    at = panel.tiles.mapTo(panel, QPointF(0, 0))
    return {"dpr": panel.devicePixelRatioF(), "image_dpr": image.devicePixelRatio(), "side": side, "T": T,
            "seen": seen, "corners": [(r.left() + at.x(), r.top() + at.y()) for r in panel.tile_rects],
            "wrong": wrong[:8], "n_wrong": len(wrong)}


def strip():
    from attnviz.figures import compare as F
    st, panel = compare_panel(40)
    s, cells, dpr = panel.strip, panel.strip_cells, panel.devicePixelRatioF()
    image = panel.grab().toImage()  # (the window: the strip at its offset in it)
    flip = F.FLIP.red(), F.FLIP.green(), F.FLIP.blue()
    token = re.compile(r".*?token (\d+) ")

    def named(x, y):
        m = token.match(hovered(s, x, y))
        return None if m is None else int(m[1])
    wrong, seen = [], 0
    x0, x1, _, _ = around(s, QRectF(s.rect()), 0)
    tops = sorted({r.top() for r in cells})
    for top in tops:  # along each line's middle: a frame's pixels and those between its sides name its token
        line = [t for t, r in enumerate(cells) if r.top() == top]
        y = (around(s, cells[line[0]], 0)[2] + around(s, cells[line[0]], 0)[3]) // 2
        red = {x: rgb(image, x, y) == flip for x in range(x0, x1)}
        starts = [x for x in red if red[x] and not red.get(x - 1)]
        ends = [x for x in red if red[x] and not red.get(x + 1)]
        if len(starts) != 2 * len(line):  # (two sides a frame)
            wrong.append(("frames", y, len(starts), len(line)))
            continue
        want = dict.fromkeys(red)
        for i, t in enumerate(line):
            want.update(dict.fromkeys(range(starts[2 * i], ends[2 * i + 1] + 1), t))
        for x in red:
            seen += 1
            if named(x, y) != want[x]:
                wrong.append(("row", x, y, want[x], named(x, y)))
    for t, r in enumerate(cells):  # down each cell's middle, from above its frame to below it
        a, b, y0, y1 = around(s, r, 3)
        x = (a + b) // 2
        red = [y for y in range(y0, y1) if rgb(image, x, y) == flip]
        for y in range(y0, y1):
            seen += 1
            want = t if red and red[0] <= y <= red[-1] else None
            if named(x, y) != want:
                wrong.append(("column", x, y, want, named(x, y)))
    at = s.mapTo(panel, QPointF(0, 0))
    return {"dpr": dpr, "image_dpr": image.devicePixelRatio(), "seen": seen, "cells": len(cells),
            "lines": len(tops), "origin": (at.x(), at.y()), "wrong": wrong[:8], "n_wrong": len(wrong)}


def patching():
    from attnviz.figures import patching as fig
    from attnviz.figures.headmap import colour
    from attnviz.ui.panels.patching_maps import PatchMap
    out = {}
    for T in (300, 37):  # pooled and not
        toks = tuple(f"t{i}" for i in range(T))
        effect = np.random.default_rng(T).uniform(-1.0, 1.0, (5, T))
        view = fig.PatchView("toy", "resid", "denoise", effect, toks, toks, T - 1, 0, 1, "a", "b", 1.0, 0.0)
        window = QWidget()  # (the map at an odd offset in its window, as in the Patching tab)
        window.resize(443, 259)
        m = PatchMap(lambda *_: None, window)
        m.setGeometry(11, 13, 421, 233)
        window.show()
        m.set_view(view)
        settle()
        image, lay = window.grab().toImage(), m.layout_()
        named, hit = [], m.hit_at
        m.hit_at = lambda x, y: named.append(hit(x, y)) or named[-1]  # (the cell the hover reads)
        wrong, seen = [], 0
        box = QRectF(lay.xs[0], lay.ys[0], lay.xs[-1] + lay.cell_w - lay.xs[0], lay.ys[-1] + lay.cell_h - lay.ys[0])
        for x, y in hatch(*around(m, box), 3):
            text = hovered(m, x, y)
            cell = named[-1]
            if cell is None:
                continue
            seen += 1
            want = colour(float(view.values[cell]) - view.unchanged, view.limit)
            if (want.red(), want.green(), want.blue()) != rgb(image, x, y) or fig.readout(view, *cell) not in text:
                wrong.append((x, y, cell, rgb(image, x, y)))
        out[f"map{T}"] = {"dpr": m.devicePixelRatioF(), "image_dpr": image.devicePixelRatio(), "pool": list(lay.pool),
                          "fractional": lay.cell_w != int(lay.cell_w), "seen": seen, "wrong": wrong[:8],
                          "n_wrong": len(wrong)}
    return out


def patterns():
    from attnviz.figures import compare as C
    from attnviz.ui.panels.patching_maps import PatternPair
    sides, ask = types.SimpleNamespace(), types.SimpleNamespace()

    def weights(T):
        sides.attentions_clean = sides.attentions_corrupt = np.random.default_rng(T).random((1, 1, T, T))
        ask.labels_clean = ask.labels_corrupt = tuple(f"w{i}" for i in range(T))
    weights(8)
    window = QWidget()  # (the pair at an odd offset in its window, as in the Patching tab)
    window.resize(443, 259)
    pair = PatternPair(types.SimpleNamespace(jobs=types.SimpleNamespace(sides=sides, ask=ask),
                                             state=types.SimpleNamespace(colormap="viridis")), window)
    pair.setGeometry(11, 13, 421, 233)
    pair.head = (0, 0)
    window.show()
    settle()
    side = int(pair.rects[0].width())
    weights(2 * side - 1)  # pooled, each pixel a block of its own
    pair.update()
    settle()
    image, att = window.grab().toImage(), sides.attentions_clean
    cell = re.compile(r"\S+ L0 H0  'w(\d+)' \u2192 'w(\d+)'")
    wrong, seen = [], 0
    for r in pair.rects:
        for x, y in hatch(*around(pair, r), 3):
            m = cell.match(hovered(pair, x, y) and pair.hover_text)
            if m is None:  # (paper there, or a pixel of the tile that names no cell)
                if inside(pair, r, x, y) and rgb(image, x, y) != (255, 255, 255):
                    wrong.append((x, y, None, rgb(image, x, y)))
                continue
            q, k = int(m[1]), int(m[2])
            seen += 1
            if tuple(int(v) for v in C.weight_rgb(att[0, 0, q, k], "viridis")) != rgb(image, x, y):
                wrong.append((x, y, (q, k), rgb(image, x, y)))
    return {"dpr": pair.devicePixelRatioF(), "image_dpr": image.devicePixelRatio(), "side": side,
            "seen": seen, "wrong": wrong[:8], "n_wrong": len(wrong)}


def grid_in_window():
    """The grid at an odd offset in its window (at 1.5 its viewport's edge between two of the
    window's device pixels): every device pixel of two rows and two columns of two heads."""
    window = QWidget()
    window.resize(922, 526)
    st = AppState()
    g = HeatmapGrid(st)
    g.setParent(window)
    g.setGeometry(11, 13, 900, 500)
    window.show()
    st.set_view_mode("layer")
    st.set_result(result(np.zeros((1, 4, 40, 40), np.float32)))
    settle()
    lo = g.layout_
    T = int(g.gw.viewportTransform().mapRect(g.img.mapRectToScene(QRectF(0, 0, lo.T, lo.T))).width() * 1.3)
    st.set_result(result((np.random.default_rng(3).random((1, 4, T, T)) ** 3).astype(np.float32)))
    settle()
    lo, port, image = g.layout_, g.gw.viewport(), window.grab().toImage()
    table, attn = heat_table(st.colormap), st.result.attentions
    tops = st.shown().tops(st.scale_mode, [0])[0]
    wrong, seen = [], 0
    for i in (0, 3):  # (the first head and one below it)
        rect = g.gw.viewportTransform().mapRect(g.img.mapRectToScene(QRectF(float(lo.x0[i]), float(lo.y0[i]), lo.T, lo.T)))
        x0, x1, y0, y1 = around(port, rect, -1)  # (a pixel in from its edges)
        for x, y in hatch(x0, x1, y0, y1, 2):
            hovered(port, x, y)
            m = READ.match(g.hover_text)
            if m is None:
                continue
            h, q, k = int(m[1]), int(m[2]), int(m[3])
            seen += 1
            if tuple(int(c) for c in table[int(heat_positions(attn[0, h, q, k], tops[h]))][:3]) != rgb(image, x, y):
                wrong.append((x, y, h, q, k, rgb(image, x, y)))
    return {"dpr": port.devicePixelRatioF(), "image_dpr": image.devicePixelRatio(), "pool": lo.pool,
            "seen": seen, "wrong": wrong[:8], "n_wrong": len(wrong)}


def long_tiles():
    """The long view's tiles at an odd offset in their window (at 1.5 their edges between two of
    the window's device pixels), each overview cell a device pixel or two: every device pixel of
    three rows and three columns of two tiles against the colour of the cell cell_at names there."""
    from attnviz.figures.overview import shown_index
    from attnviz.ui.views.long_panes import HeadTiles
    region, n_head = (0, 500, 0, 500), 4
    lg = types.SimpleNamespace(region=region, log=False, run=True, head=lambda: 0, tiles=None,
                               patterns=types.SimpleNamespace(n_layer=1, n_head=n_head, window=[None], causal=True))
    st = types.SimpleNamespace(long=lg, colormap="viridis", layer=0, scale_mode="per-head", model=None,
                               badge=lambda layer, h: "")
    window = QWidget()
    window.resize(443, 259)
    tiles = HeadTiles(st, window)
    tiles.setGeometry(11, 13, 421, 233)
    window.show()
    side = round(tiles.tile_px() * tiles.devicePixelRatioF() * 0.7)  # (a cell over one or two device pixels)
    values = np.random.default_rng(5).random((n_head, side, side)).astype(np.float32)
    edges = np.linspace(0, region[1], side + 1).astype(np.int64)
    lg.tiles = types.SimpleNamespace(values=values, region=region, layer=0, heads=list(range(n_head)), exact=False,
                                     blank=None, options=(False,), edges=lambda axis: edges)
    tiles.update()
    settle()
    image, table = window.grab().toImage(), tiles.table()
    index, at, dpr = shown_index(lg.tiles, st.scale_mode), tiles.mapTo(window, QPointF(0, 0)), tiles.devicePixelRatioF()
    wrong, seen = [], 0
    for h in (0, n_head - 1):
        r = tiles.head_rect(h)
        for x, y in hatch(*around(tiles, r, -2), 3):  # (inside the tile's frame)
            cell = tiles.cell_at(h, QPointF(x / dpr - at.x(), y / dpr - at.y()))
            seen += 1
            if cell is None or image.pixel(x, y) & 0xFFFFFF != table[index[h, cell[1], cell[2]]] & 0xFFFFFF:
                wrong.append((x, y, h, cell and cell[1:], hex(image.pixel(x, y) & 0xFFFFFF)))
    return {"dpr": dpr, "image_dpr": image.devicePixelRatio(), "side": side, "origin": (at.x(), at.y()),
            "corners": [(tiles.head_rect(h).left() + at.x(), tiles.head_rect(h).top() + at.y()) for h in (0, n_head - 1)],
            "seen": seen, "wrong": wrong[:8], "n_wrong": len(wrong)}


if __name__ == "__main__":
    app = QApplication([])
    pg.setConfigOptions(mouseRateLimit=0)  # every move read (the scene drops moves closer in time)
    print(json.dumps({name: globals()[name]() for name in sys.argv[1:]}))
