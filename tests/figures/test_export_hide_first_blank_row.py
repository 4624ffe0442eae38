"""With the first key hidden, a decoder's first query has no other key: its renormalised row is
0/0, undefined. Every export says so alike: NaN in .npy, empty cells in CSV, null in JSON, and the
figure paints the row in the colormap's no-value colour (with a note) where the other rows are
coloured; the numbers were written as zeros, which read as a row that attends nowhere. (The figure
painted it white, the greyscale CET-L1's top.)"""

import csv
import math
import io
import json

import numpy as np
from PySide6.QtGui import QColor

from attnviz.figures import heatmaps
from attnviz.figures.data import csv_text, json_text, make_view, npy_bytes
from attnviz.figures.style import no_value_colour

TEXT = "abcabcab"


def test_the_first_row_of_a_decoder_is_undefined_in_every_export(qapp, toy):
    run = toy.run(TEXT)  # <|endoftext|> first: every query attends to it
    T = len(run.tokens)
    view = make_view(run, model="toy", scope="head", layer=0, head=0, hide_first=True)
    arr = np.load(io.BytesIO(npy_bytes(view)), allow_pickle=False)
    assert arr.shape == (T, T - 1) and np.isnan(arr[0]).all() and not np.isnan(arr[1:]).any()
    np.testing.assert_allclose(arr[1:].sum(-1), 1, atol=1e-5)
    rows = list(csv.reader(io.StringIO(csv_text(view))))
    assert rows[1] == [run.labels[0]] + [""] * (T - 1)
    assert all(cell != "" for cell in rows[2][1:])
    doc = json.loads(json_text(view))
    assert doc["weights"][0] == [None] * (T - 1) and None not in doc["weights"][1]
    layer = make_view(run, model="toy", scope="layer", layer=0, hide_first=True)
    long_rows = list(csv.reader(io.StringIO(csv_text(layer))))[1:]
    assert {r[-1] for r in long_rows if r[2] == "0"} == {""}
    assert "" not in {r[-1] for r in long_rows if r[2] != "0"}
    # the figure: the first row no value, the second row's first cell coloured
    for name in ("viridis", "CET-L1", "plasma"):
        view = make_view(run, model="toy", scope="head", layer=0, head=0, hide_first=True, colormap=name)
        image, lay = heatmaps.render_image(view, 600)
        (box,) = lay.panels
        at = lambda q, k: QColor(image.pixel(int(box.x + (k + 0.5) * box.cell), int(box.y + (q + 0.5) * box.cell))).getRgb()[:3]  # noqa: E731
        nv = no_value_colour(name)
        assert [at(0, k) for k in range(T - 1)] == [nv] * (T - 1)
        assert at(1, 0) != nv
        assert any("a row with no other key has no value" in text for text, _f, _c in lay.header_lines)


def test_a_figure_smaller_than_its_rows_blanks_a_pixel_only_where_each_row_is_undefined(qapp):
    """Drawn smaller than its cells, a figure pools rows (their block max): a pixel whose rows are
    all undefined has no value, one with a defined row shows those rows (an undefined row's zeros were
    pooled into the colour of 0)."""
    from attnviz.figures.export_view import ExportView

    T, n_blank = 600, 9  # a sink head's first 9 rows: no weight left once the first key is hidden
    att = np.tril(np.random.default_rng(0).random((T, T), dtype=np.float32))[:, 1:]
    att[:n_blank] = 0
    att /= np.maximum(att.sum(-1, keepdims=True), 1e-30)
    labels = [f"t{i}" for i in range(T)]
    view = ExportView(model="m", text="", tokens=labels, labels=labels, ids=list(range(T)), scope="head",
                      layer=0, head=0, layers=[0], heads=[0], patterns=att[None, None], key_pos=list(range(1, T)),
                      kv_group=[0], colormap="CET-L1", scale_mode="shared", hide_first=True,
                      levels=np.array([[[0.0, float(att.max())]]], np.float32))
    image, lay = heatmaps.render_image(view, 400)
    (box,) = lay.panels
    f = math.ceil(1 / box.cell)
    assert f >= 2 and n_blank % f
    # the pixel at the middle of the block of f x f cells from (q, k)
    at = lambda q, k: QColor(image.pixel(int(box.x + (k + f / 2) * box.cell), int(box.y + (q + f / 2) * box.cell))).getRgb()[:3]  # noqa: E731
    whole = n_blank // f * f  # rows in blocks of undefined rows alone
    nv = no_value_colour("CET-L1")
    # (the first and last blocks of each side under the frame)
    assert {at(q, k) for q in range(f, whole, f) for k in range(f, T - 1 - 3 * f, f)} == {nv}
    assert at(whole, f) != nv  # (its block's last row is defined)
