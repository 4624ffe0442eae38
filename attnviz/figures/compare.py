"""The comparison's figures: the layers x heads JSD map (figures/headmap.py's map, one cell per
head, white = unchanged, redder = moved more) and its numbers as CSV. QPainter only: the command
line writes it offscreen, the window's Compare panel paints the same map."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.figures import headmap
from attnviz.figures.data import ExportError
from attnviz.figures.render import encode_png

MAP_WIDTH = 640


def jsd_map(jsd, a_name: str, b_name: str, kv_group=None, focus=None) -> headmap.HeadMap:
    """The JSD map [n_layer, n_head] (bits) as a HeadMap titled with both models."""
    return headmap.HeadMap(title=f"Attention JSD, {a_name} against {b_name}",
                           values=np.asarray(jsd, dtype=np.float64), unit="bits",
                           kv_group=kv_group, focus=focus)


def map_height(hm: headmap.HeadMap, width: int) -> int:
    """A height that gives the map square cells at `width`."""
    n_layer, n_head = hm.values.shape
    cell = max(4.0, (width - 60) / max(n_head, 1))
    return int(min(4000, 60 + cell * n_layer + 12))


def png_bytes(hm: headmap.HeadMap, width: int = MAP_WIDTH) -> bytes:
    """The map rendered on white, `width` pixels wide, as PNG bytes."""
    height = map_height(hm, width)
    lay = headmap.layout(hm, width, height)
    image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    if image.isNull():
        raise ExportError(f"cannot allocate a {lay.width} x {lay.height} image")
    p = QPainter(image)
    try:
        headmap.paint(p, hm, lay, background=QColor("white"))
    finally:
        p.end()
    return encode_png(image)


def csv_text(jsd, jsd_max=None) -> str:
    """layer,head,jsd[,jsd_max] rows, one per head (bits)."""
    jsd = np.asarray(jsd)
    rows = ["layer,head,jsd" + (",jsd_max" if jsd_max is not None else "")]
    for l in range(jsd.shape[0]):
        for h in range(jsd.shape[1]):
            rows.append(f"{l},{h},{float(jsd[l, h])!r}"
                        + (f",{float(np.asarray(jsd_max)[l, h])!r}" if jsd_max is not None else ""))
    return "\n".join(rows) + "\n"
