"""Export: pixels of the PNG match the attention, SVG is XML with titles and tokens, the sidecar
round-trips, the numbers equal the engine's, failed writes leave nothing (the command line, headless:
tests/cli/test_export_cli.py)."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import csv  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import xml.etree.ElementTree as ET  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnviz.engine.errors import InputError  # noqa: E402
from attnviz.engine.computing.patterns import drop_first_key, select_patterns  # noqa: E402
from attnviz.figures import data as export_data  # noqa: E402
from attnviz.figures.data import ExportError, make_view, open_sidecar  # noqa: E402
from export_files import leftovers  # noqa: E402

SENTENCE = "The keys to the cabinet are on the table."
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def run(minilm):
    return minilm.run(SENTENCE)


def fake_result(n_layer=2, n_head=4, T=5, kv_group=None, seed=0):
    """A RunResult look-alike with random rows that sum to 1."""
    rng = np.random.default_rng(seed)
    att = rng.random((n_layer, n_head, T, T)).astype(np.float32) ** 4
    att /= att.sum(-1, keepdims=True)
    labels = [f"t{i}" for i in range(T)]
    kv = np.arange(n_head) if kv_group is None else np.asarray(kv_group)
    return SimpleNamespace(text="fake text", tokens=labels, labels=labels,
                           input_ids=np.arange(T, dtype=np.int64), attentions=att, kv_group=kv)


def read_image(path):
    from PySide6.QtGui import QImage

    img = QImage(str(path))
    assert not img.isNull(), f"{path} is not a readable image"
    return img


def cell_rgb(img, panel, q, k):  # the colour at the centre of cell (q, k) of a sidecar panel
    x = panel["x"] + (k + 0.5) * panel["cell"]
    y = panel["y"] + (q + 0.5) * panel["cell"]
    c = img.pixelColor(int(x), int(y))
    return c.red(), c.green(), c.blue()


# --- pure data (no Qt needed) ------------------------------------------------------------------

def test_drop_first_key_renormalises_and_never_nans():
    att = np.array([[[1.0, 0.0, 0.0], [0.5, 0.25, 0.25], [0.2, 0.6, 0.2]]], np.float32)
    out = drop_first_key(att)
    assert out.shape == (1, 3, 2)
    np.testing.assert_allclose(out[0, 0], [0.0, 0.0])  # all weight was on the hidden key
    np.testing.assert_allclose(out[0, 1], [0.5, 0.5])
    np.testing.assert_allclose(out[0, 2], [0.75, 0.25])
    assert np.isfinite(out).all()


def test_select_patterns_and_bad_indices(run):
    att = run.attentions
    assert select_patterns(att, "head", 3, 1).shape == att.shape[2:]
    np.testing.assert_array_equal(select_patterns(att, "layer", 2), att[2])
    assert select_patterns(att, "all") is att
    with pytest.raises(InputError, match=r"layer 6 is out of range: .* 6 layers \(0\.\.5\)"):
        select_patterns(att, "layer", 6)
    with pytest.raises(InputError, match=r"head 12 is out of range"):
        make_view(run, model="m", scope="head", layer=0, head=12)


def test_heat_index_rounds_onto_the_255_colours_after_the_gap():
    from attnviz.figures.style import heat_index

    idx = heat_index(np.array([0.0, 0.499, 0.5, 1.0, 2.0, -1.0], np.float32), 1.0)
    # round(v * 254) + 1, clipped to 1..255: 0 is colour 1 (the lowest), never the gap (0)
    assert list(idx) == [1, 128, 128, 255, 255, 1]
    per_head = heat_index(np.array([[[0.5]], [[0.5]]], np.float32), np.array([[[1.0]], [[0.5]]]))
    assert per_head.ravel().tolist() == [128, 255]


def test_nothing_to_export_is_an_error():
    with pytest.raises(ExportError, match="no attention"):
        make_view(None, model="m", scope="all", layer=0)
    with pytest.raises(ExportError, match="only 1 token"):
        make_view(fake_result(T=1), model="m", scope="all", layer=0, hide_first=True)


# --- numbers -----------------------------------------------------------------------------------

def test_npy_csv_json_equal_the_engine(run, tmp_path):
    from attnviz.figures.write import export_result

    att = run.attentions
    T = len(run.tokens)
    cases = [("head", dict(layer=3, head=1), att[3, 1]), ("layer", dict(layer=2), att[2]),
             ("all", dict(layer=0), att)]
    for scope, kw, expected in cases:
        npy = tmp_path / f"{scope}.npy"
        export_result(run, npy, model="all-MiniLM-L6-v2", scope=scope, **kw)
        np.testing.assert_array_equal(np.load(npy), expected)

        js = tmp_path / f"{scope}.json"
        export_result(run, js, model="all-MiniLM-L6-v2", scope=scope, **kw)
        doc = json.loads(js.read_text())
        assert doc["tokens"] == run.tokens and doc["ids"] == run.input_ids.tolist()
        assert doc["shape"] == list(expected.shape)
        np.testing.assert_array_equal(np.array(doc["weights"], np.float32), expected)

        path = tmp_path / f"{scope}.csv"
        export_result(run, path, model="all-MiniLM-L6-v2", scope=scope, **kw)
        rows = list(csv.reader(io.StringIO(path.read_text())))
        if scope == "head":
            assert rows[0][1:] == run.labels and [r[0] for r in rows[1:]] == run.labels
            np.testing.assert_array_equal(np.array([r[1:] for r in rows[1:]], np.float32), expected)
        else:
            assert rows[0] == ["layer", "head", "query_pos", "query_token", "key_pos", "key_token",
                               "weight"]
            body = rows[1:]
            assert len(body) == expected.size
            got = np.zeros(att.shape, np.float32)
            for layer, head, q, qt, k, kt, w in body:
                l, h, q, k = int(layer), int(head), int(q), int(k)
                assert qt == run.labels[q] and kt == run.labels[k]
                got[l, h, q, k] = np.float32(w)
            sel = got[2] if scope == "layer" else got
            np.testing.assert_array_equal(sel, expected)
    assert T == 12


def test_hidden_first_numbers_drop_column_zero(run, tmp_path):
    from attnviz.figures.write import export_result

    out = tmp_path / "h.npy"
    export_result(run, out, model="m", scope="layer", layer=1, hide_first=True)
    arr = np.load(out)
    assert arr.shape == (12, 12, 11)
    np.testing.assert_allclose(arr, drop_first_key(run.attentions[1]), atol=1e-6, rtol=0)
    np.testing.assert_allclose(arr.sum(-1), 1.0, atol=1e-5)
    csv_path = tmp_path / "h.csv"
    export_result(run, csv_path, model="m", scope="all", layer=0, hide_first=True)
    body = list(csv.reader(io.StringIO(csv_path.read_text())))[1:]
    assert {int(r[4]) for r in body} == set(range(1, 12))  # original key positions, 0 is gone


# --- images ------------------------------------------------------------------------------------

def test_png_head_pixels_match_attention(qapp, run, tmp_path):
    from attnviz.figures.write import export_result
    from attnviz.figures.style import heat_index, heat_table

    out = tmp_path / "head.png"
    written = export_result(run, out, model="all-MiniLM-L6-v2", scope="head", layer=3, head=1,
                            width=1800, colormap="viridis")
    assert written == [out, tmp_path / "head.png.json"]
    img = read_image(out)
    meta = open_sidecar(out)
    assert img.width() == 1800 and (meta["width"], meta["height"]) == (img.width(), img.height())
    (panel,) = meta["panels"]
    weights = run.attentions[3, 1]  # [T, T]
    T = weights.shape[0]
    assert (panel["n_query"], panel["n_key"]) == (T, T) and panel["cell"] >= 20
    lut = heat_table("viridis")[:, :3]
    hi = float(run.attentions.max())  # the shared scale's top is the run's, as in the window
    assert meta["levels"] == [0.0, pytest.approx(hi)]
    rgb = np.array([[cell_rgb(img, panel, q, k) for k in range(T)] for q in range(T)])
    # every cell centre has exactly the lookup-table colour of its weight (row-major, not transposed)
    np.testing.assert_array_equal(rgb, lut[heat_index(weights, hi)])
    # viridis gets brighter with the value: the brightest cell is where the weight is largest
    lum = rgb @ np.array([0.299, 0.587, 0.114])
    assert np.unravel_index(lum.argmax(), lum.shape) == np.unravel_index(weights.argmax(), weights.shape)
    # the colour bar is there: its top is the highest colour, its bottom the lowest
    def near(c, want):
        return max(abs(int(a) - int(b)) for a, b in zip(c, want)) <= 3
    right = panel["x"] + panel["cell"] * T
    bar_cols = [x for x in range(int(right) + 5, img.width())
                if near(cell_rgb(img, {"x": x, "y": panel["y"] + 4, "cell": 0}, 0, 0), lut[255])]
    assert bar_cols, "no colour bar top (lut[255]) right of the heatmap"
    bottom = panel["y"] + panel["cell"] * T - 4
    assert near(cell_rgb(img, {"x": bar_cols[len(bar_cols) // 2], "y": bottom, "cell": 0}, 0, 0),
                lut[1])


def test_png_layer_grid_per_head_scale(qapp, run, tmp_path):
    from attnviz.figures.write import export_result
    from attnviz.figures.style import heat_index, heat_table

    out = tmp_path / "layer.png"
    export_result(run, out, model="all-MiniLM-L6-v2", scope="layer", layer=2, width=1600,
                  colormap="magma", scale_mode="per-head")
    img, meta = read_image(out), open_sidecar(out)
    assert [p["head"] for p in meta["panels"]] == list(range(12))
    assert meta["scope"] == "layer" and meta["head"] is None and meta["scale_mode"] == "per-head"
    lut = heat_table("magma")[:, :3]
    for panel in meta["panels"]:
        w = run.attentions[2, panel["head"]]
        q, k = np.unravel_index(w.argmax(), w.shape)
        assert cell_rgb(img, panel, q, k) == tuple(lut[255])  # each head reaches its own top colour
        q, k = np.unravel_index(w.argmin(), w.shape)
        assert cell_rgb(img, panel, q, k) == tuple(lut[heat_index(w.min(), w.max())])


def test_png_all_layers_shared_scale(qapp, run, tmp_path):
    from attnviz.figures.write import export_result
    from attnviz.figures.style import heat_index, heat_table

    out = tmp_path / "all.png"
    export_result(run, out, model="all-MiniLM-L6-v2", scope="all", layer=0, width=2000)
    img, meta = read_image(out), open_sidecar(out)
    assert len(meta["panels"]) == 72 and meta["view_mode"] == "all"
    lut = heat_table("viridis")[:, :3]
    hi = float(run.attentions.max())
    for panel in meta["panels"][::7]:
        w = run.attentions[panel["layer"], panel["head"]]
        for q, k in [(0, 0), (5, 2), (11, 11)]:
            assert cell_rgb(img, panel, q, k) == tuple(lut[heat_index(w[q, k], hi)])


def test_svg_is_xml_with_titles_labels_and_sidecar(qapp, run, tmp_path):
    from PySide6.QtSvg import QSvgRenderer

    from attnviz.figures.write import export_result

    out = tmp_path / "layer.svg"
    export_result(run, out, model="all-MiniLM-L6-v2", scope="layer", layer=3, width=1400,
                  colormap="inferno", hide_first=True)
    root = ET.parse(out).getroot()
    assert root.tag == f"{SVG_NS}svg" and root.get("viewBox").startswith("0 0 1400 ")
    texts = [t.text for t in root.iter(f"{SVG_NS}text")]
    for want in ["L3 H0", "L3 H1", "L3 H11", "cabinet", "keys", "[SEP]", "attention weight"]:
        assert want in texts, want
    # 12 heads on a 3 x 4 grid: queries left of each row, keys under each column; [CLS] is a
    # query but its key column is hidden
    assert texts.count("[CLS]") == 3 and texts.count("[SEP]") == 3 + 4
    assert any("all-MiniLM-L6-v2" in (t or "") for t in texts)
    assert len(list(root.iter(f"{SVG_NS}rect"))) >= 12 * 12 * 11  # vector cells
    assert QSvgRenderer(str(out)).isValid()

    meta = open_sidecar(out)  # by the image path
    assert open_sidecar(str(out) + ".json") == meta  # or by the sidecar itself
    assert {k: meta[k] for k in ("model", "text", "layer", "head", "scope", "colormap",
                                 "scale_mode", "hide_first")} == {
        "model": "all-MiniLM-L6-v2", "text": SENTENCE, "layer": 3, "head": None,
        "scope": "layer", "colormap": "inferno", "scale_mode": "shared", "hide_first": True}
    assert meta["tokens"] == run.tokens and meta["attnviz"]


def test_gqa_heads_are_marked(qapp, tmp_path):
    from attnviz.figures.write import export_view
    from attnviz.figures.heatmap_layout import layout

    res = fake_result(n_layer=2, n_head=8, T=6, kv_group=[0, 0, 0, 0, 1, 1, 1, 1])
    view = make_view(res, model="tiny-gqa", scope="layer", layer=1)
    assert view.grouped and layout(view, 1200).n_cols % 4 == 0  # a KV group never wraps
    out = tmp_path / "gqa.svg"
    export_view(view, out, width=1200)
    texts = [t.text for t in ET.parse(out).getroot().iter(f"{SVG_NS}text")]
    assert "L1 H0 \u00b7 kv0" in texts and "L1 H7 \u00b7 kv1" in texts
    head_view = make_view(res, model="tiny-gqa", scope="head", layer=0, head=5)
    export_view(head_view, tmp_path / "h.svg", width=800)
    assert "KV head 1 shared by H4\u2013H7" in (tmp_path / "h.svg").read_text()


def test_big_svg_embeds_heatmaps_and_small_cells_keep_peaks(qapp, tmp_path):
    from attnviz.figures.write import export_view
    from attnviz.figures.heatmaps import SVG_MAX_RECTS, max_pool

    res = fake_result(n_layer=2, n_head=4, T=80)
    view = make_view(res, model="fake", scope="all", layer=0)
    assert view.patterns.size > SVG_MAX_RECTS
    out = tmp_path / "big.svg"
    export_view(view, out, width=1000)
    root = ET.parse(out).getroot()
    assert len(list(root.iter(f"{SVG_NS}image"))) >= 8  # one per heatmap (+ the colour bar)
    assert len(list(root.iter(f"{SVG_NS}rect"))) < 200
    assert "L1 H3" in [t.text for t in root.iter(f"{SVG_NS}text")]

    p = np.zeros((5, 7), np.float32)
    p[4, 6] = 0.9  # a lone peak in the padded corner block
    p[0, 1] = 0.3
    np.testing.assert_array_equal(max_pool(p, 3), np.array([[0.3, 0, 0], [0, 0, 0.9]], np.float32))


# --- failures leave nothing ---------------------------------------------------------------------

def test_unwritable_path_reports_and_leaves_nothing(qapp, run, tmp_path):
    from attnviz.figures.write import export_result

    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    for name in ("x.png", "x.svg", "x.npy", "x.csv"):
        with pytest.raises(ExportError, match=r"cannot write .*afile.*is not a folder"):
            export_result(run, blocker / name, model="m", scope="layer", layer=0)
    with pytest.raises(ExportError, match="does not exist"):
        export_result(run, tmp_path / "missing" / "x.png", model="m", scope="layer", layer=0)
    assert leftovers(tmp_path) == ["afile"]


def test_failure_midway_removes_partial_and_temp_files(qapp, run, tmp_path, monkeypatch):
    from attnviz.figures.write import export_result

    (tmp_path / "keep.txt").write_text("mine")
    # the disk fills while the image is being written
    real_fsync = os.fsync
    def full_disk(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(export_data.os, "fsync", full_disk)
    with pytest.raises(ExportError, match="no space left on device"):
        export_result(run, tmp_path / "fig.png", model="m", scope="head", layer=0, head=0)
    assert leftovers(tmp_path) == ["keep.txt"]
    monkeypatch.setattr(export_data.os, "fsync", real_fsync)

    # the image lands but moving its sidecar into place fails: the image goes too
    real_replace = os.replace
    calls = []
    def replace_then_fail(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied")
        return real_replace(src, dst)
    monkeypatch.setattr(export_data.os, "replace", replace_then_fail)
    with pytest.raises(ExportError, match=r"fig\.svg\.json: permission denied"):
        export_result(run, tmp_path / "fig.svg", model="m", scope="head", layer=0, head=0)
    assert leftovers(tmp_path) == ["keep.txt"]


def test_open_sidecar_errors(tmp_path):
    with pytest.raises(ExportError, match="no attnviz view file"):
        open_sidecar(tmp_path / "nope.png")
    with pytest.raises(ExportError, match=r"no attnviz view file at \S*/missing\.json$"):
        open_sidecar(tmp_path / "missing.json")  # (the path as given, not missing.json.json)
    bad = tmp_path / "bad.png.json"
    bad.write_text("{not json")
    with pytest.raises(ExportError, match=r"not valid JSON: .* line 1"):
        open_sidecar(tmp_path / "bad.png")
    deep = tmp_path / "deep.json"  # the engine's one JSON reader: nesting and size are refused in words
    deep.write_text("[" * 100_000)
    with pytest.raises(ExportError, match="nested too deeply"):
        open_sidecar(deep)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ExportError, match="expected a JSON object"):
        open_sidecar(listed)
    other = tmp_path / "numbers.json"
    other.write_text(json.dumps({"weights": [1.0]}))
    with pytest.raises(ExportError, match="not an attnviz view file"):
        open_sidecar(other)
    partial = tmp_path / "p.json"
    partial.write_text(json.dumps({"kind": "attnviz-view", "version": 1, "model": "m"}))
    with pytest.raises(ExportError, match="missing text, tokens, layer"):
        open_sidecar(partial)
    doc = {"kind": "attnviz-view", "version": 1, "model": "m", "text": "t", "tokens": ["t"],
           "layer": "3", "scope": "layer", "colormap": "viridis", "scale_mode": "shared",
           "hide_first": False}
    partial.write_text(json.dumps(doc))
    with pytest.raises(ExportError, match="layer should be int, got '3'"):
        open_sidecar(partial)
    doc.update(layer=3, scale_mode="log")
    partial.write_text(json.dumps(doc))
    with pytest.raises(ExportError, match="scale_mode 'log'"):
        open_sidecar(partial)


@pytest.mark.parametrize("fmt", ["Format_RGB32", "Format_ARGB32", "Format_RGB888"])
def test_png_encoding_gives_back_every_pixel_and_the_resolution(qapp, fmt):
    """encode_png (every figure's PNG: unfiltered rows, zlib level 1) decodes, by Qt's own reader,
    to the pixels painted, alpha included where the image has it, at the image's dots per metre;
    an odd width (rows padded in the QImage) and a one-pixel image too."""
    from PySide6.QtGui import QImage

    from attnviz.figures.render import encode_png

    rng = np.random.default_rng(3)
    for w, h in ((37, 11), (1, 1), (240, 60)):
        img = QImage(w, h, getattr(QImage.Format, fmt))
        img.setDotsPerMeterX(5906)  # 150 dpi
        img.setDotsPerMeterY(3780)
        for y in range(h):
            for x in range(w):
                r, g, b, a = (int(v) for v in rng.integers(0, 256, 4))
                img.setPixel(x, y, (a << 24 | r << 16 | g << 8 | b) if img.hasAlphaChannel()
                             else (0xFF000000 | r << 16 | g << 8 | b))
        data = encode_png(img)
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        back = QImage.fromData(data, "PNG")
        assert (back.width(), back.height()) == (w, h)
        assert back.hasAlphaChannel() == img.hasAlphaChannel()
        assert (back.dotsPerMeterX(), back.dotsPerMeterY()) == (5906, 3780)
        want = img.convertToFormat(QImage.Format.Format_ARGB32)
        got = back.convertToFormat(QImage.Format.Format_ARGB32)
        assert all(got.pixel(x, y) == want.pixel(x, y) for y in range(h) for x in range(w))
