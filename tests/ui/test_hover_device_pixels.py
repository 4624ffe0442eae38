"""At a device pixel ratio of 2 (QT_SCALE_FACTOR=2 on the offscreen platform, in a Python of its
own: a running QApplication keeps its ratio) the grid's and the focus view's hovers name the cell
Qt paints on the device pixel under the pointer, and a click picks it: the pointer is moved onto
every device pixel of a pooled picture's rows, at positions between whole widget pixels as Qt
delivers them there, and the named cell's colour compared with the grabbed device pixel's; the DLA
view's likewise. A click on a block's last device row or column (the grid's Shift+click and right
click, the focus view's click) names the cell the hover names there. (QGraphicsView gives its
scene the pointer rounded to a whole widget pixel: on every other device pixel the grid and the
focus view read the one right of or below it; there a click reads the next block.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = r"""
import json, math, re, types
import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, QRectF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication
from attnviz.figures.style import heat_positions, heat_table
from attnviz.ui.machinery.state import AppState
from attnviz.ui.views.focus import FocusView
from attnviz.ui.views.grid import HeatmapGrid

app = QApplication([])
pg.setConfigOptions(mouseRateLimit=0)  # every move read (the scene drops moves closer in time)
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
        for y in range(y0 + i, y1, 17):  # (rows of both parities, and every device pixel along each)
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
    clicked, clicks = [], 0  # the cell each click names (Why here? and the query hear it)
    fv.sigCellClicked.connect(lambda cell, button, at: clicked.append(tuple(cell)[1:]))
    for x, y in edges(fv, x0, x1, y0, y1, lambda a, b: a[1] != b[1], lambda a, b: a[2] != b[2]):
        pos = QPointF(x / dpr, y / dpr)
        h, q, k, _ = read(fv, pos)
        click(fv, pos, Qt.MouseButton.LeftButton)
        clicks += 1
        if clicked[-1:] != [(h, q, k)] or st.query_pos != q:
            wrong.append(("click", x, y, (h, q, k), clicked[-1:], st.query_pos))
        st.set_query(None)
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


print(json.dumps({"grid": grid(), "focus": focus(), "dla": dla()}))
"""


def test_the_hovers_name_the_device_pixel_under_the_pointer(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": "2",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    g, f, d = out["grid"], out["focus"], out["dla"]
    assert all(v["dpr"] == v["image_dpr"] == 2 for v in (g, f, d)), out
    assert g["pool"] > 1 and g["seen"] > 10000 and g["clicks"] == 48, g
    assert f["pooled"] and f["hot"] > 100 and f["seen"] > 2 * f["hot"] and f["clicks"] == 24, f
    assert g["n_wrong"] == 0, g
    assert f["n_wrong"] == 0, f
    assert d["seen"] > 10000 and d["n_wrong"] == 0, d
