"""With a query row picked, the grid dims every painted pixel of the other rows' cells and no
other pixel: grabbed before and after the pick, at window sizes where the tiles' edges fall
between screen pixels, in the layer and the all view, pooled and not, at device pixel ratios of
1 (here), 1.5 and 2 (a Python of its own each, QT_SCALE_FACTOR on the offscreen platform: a
running QApplication keeps its ratio). (A filled rect's edges round to other screen pixels than
the columns of the scaled mosaic under it: a tile's first or last key column stayed bright in
every dimmed row, or the gap beside a tile was dimmed.)"""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from attnviz.figures.style import heat_positions, heat_table
from attnviz.ui.machinery.state import AppState
from attnviz.ui.views.grid import HeatmapGrid

REPO = Path(__file__).resolve().parents[2]
Q = 5  # the picked query row
SIZES = [(700, 611), (753, 480), (806, 480), (1071, 480), (1124, 611), (1177, 611), (1011, 640)]
VIEWS = [("layer", 9, 12), ("all", 6, 12), ("all", 6, 90), ("layer", 6, 300)]  # (mode, heads, tokens)


def settle():
    for _ in range(5):
        QApplication.sendPostedEvents()
        QApplication.processEvents()


def grabbed(g) -> np.ndarray:  # [h, w, 3] the viewport's device pixels
    image = g.gw.grab().toImage().convertToFormat(QImage.Format.Format_RGBX8888)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    return rows[:, :4 * image.width()].reshape(image.height(), image.width(), 4)[..., :3].astype(int)


def misses(mode: str, n_head: int, T: int, w: int, h: int) -> dict:
    """Every head's cells 0.2, its row Q 1.0: the grid grabbed without a query and with Q picked.
    Counts the device pixels painted with a 0.2 cell (another row's), those of them not dimmed,
    and the pixels dimmed that no such cell paints (the query's white line aside)."""
    st = AppState()
    g = HeatmapGrid(st)
    g.resize(w, h)
    g.show()
    st.set_view_mode(mode)
    attn = np.full((1, n_head, T, T), 0.2, np.float32)
    attn[:, :, Q, :] = 1.0
    labels = [f"t{i}" for i in range(T)]
    st.set_result(types.SimpleNamespace(attentions=attn, labels=labels, tokens=labels, text="x",
                                        offsets=[(i, i + 1) for i in range(T)], kv_group=np.arange(n_head)))
    settle()
    before = grabbed(g)
    st.set_query(Q)
    settle()
    after = grabbed(g)
    visible, dpr = g.query_dim.isVisible(), g.gw.devicePixelRatioF()
    g.close()
    g.deleteLater()
    top = float(st.shown().tops(st.scale_mode, [0])[0][0])
    other = np.array(heat_table(st.colormap)[int(heat_positions(np.float32(0.2), top))][:3], int)
    cells = (before == other).all(-1)  # painted with another row's cell
    line = (after == 255).all(-1)  # the white line round the query's row
    dimmed = (after <= before // 2 + 2).all(-1) & (after < before).any(-1)
    return {"visible": visible, "dpr": dpr, "cells": int(cells.sum()), "bright": int((cells & ~dimmed & ~line).sum()),
            "outside": int((~cells & (after != before).any(-1) & ~line).sum())}


def all_misses() -> dict:
    return {f"{mode} {n_head}x{T} {w}x{h}": misses(mode, n_head, T, w, h)
            for mode, n_head, T in VIEWS for w, h in SIZES}


def check(found: dict, ratio: float) -> None:
    for name, m in found.items():
        assert m["visible"] and m["dpr"] == ratio and m["cells"] > 20000, (name, m)
    wrong = {name: m for name, m in found.items() if m["bright"] or m["outside"]}
    assert not wrong, wrong


def test_the_dimmed_rows_cover_exactly_their_painted_pixels(qapp):
    check(all_misses(), 1.0)


def test_the_dimmed_rows_cover_exactly_their_painted_pixels_at_ratios_of_1_5_and_2(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    runs = {ratio: subprocess.Popen([sys.executable, __file__], cwd=tmp_path,
                                    env={**env, "QT_SCALE_FACTOR": ratio}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for ratio in ("1.5", "2")}
    try:
        for ratio, run in runs.items():
            stdout, stderr = run.communicate(timeout=600)
            assert run.returncode == 0, stderr
            check(json.loads(stdout.strip().splitlines()[-1]), float(ratio))
    finally:
        for run in runs.values():  # (the other one, where one failed)
            run.kill()
            run.wait()


if __name__ == "__main__":
    app = QApplication([])
    print(json.dumps(all_misses()))
