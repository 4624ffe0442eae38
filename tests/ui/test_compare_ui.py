"""Compare in the window: model B beside A, following typing. The A − B tiles are painted with the
difference of the two runs' patterns in a map symmetric about 0, the token strip frames the
positions whose top-1 flips, the JSD map focuses a head; a B that does not open changes nothing;
leaving Compare frees B; an export writes the picture and a sidecar with B's identity."""

from __future__ import annotations

import gc
import json
import shutil
import weakref

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from safetensors.numpy import load_file, save_file

from attnviz.engine import load_model
from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing.pair import models_pair
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.registry import TOY_MODEL, resolve
from attnviz.engine.reading.token_text import plural
from attnviz.figures import compare as F
from attnviz.figures.numbers import plain_number
from attnviz.figures.style import ERROR
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import hover, tip_shown
from attnviz.engine.computing.request import RunRequest

WAIT = 30000
TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def window(toy_compare_window):
    return toy_compare_window(TEXT)


@pytest.fixture(scope="module")
def nudged(tmp_path_factory):
    """The toy model with every weight nudged, its tokenizer and config kept: a B of one shape."""
    src = resolve(TOY_MODEL)[1]
    folder = tmp_path_factory.mktemp("toy_b")
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(src / name, folder / name)
    rng = np.random.default_rng(1)
    save_file({k: v + (rng.standard_normal(v.shape) * 0.3).astype(v.dtype)
               for k, v in load_file(src / "model.safetensors").items()}, folder / "model.safetensors")
    return folder


def compared(qtbot, w, text):
    jobs = w.worker.compare_jobs
    # the comparison, next-token numbers included, follows each run; the induction heads once per B
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == text
                    and jobs.comparison.doc is not None and jobs.comparison.doc["kld"] is not None
                    and jobs.induction is not None, timeout=WAIT)
    return jobs.comparison


def test_the_a_minus_b_tiles_and_the_flip_marks_are_painted(window, qtbot):
    w = window
    open_compare(w, BSource("checkpoint", 0))
    c = compared(qtbot, w, TEXT)
    panel, jobs = w.compare_panel, w.worker.compare_jobs
    # the engine's numbers for A (the last step) against step 0 on the same ids
    a, b = w.state.model, w.state.checkpoints.model(0)
    want = C.compare(models_pair(a, b, c.result.input_ids, C.compare_trace))
    np.testing.assert_allclose(c.doc["heads_jsd"], want["heads_jsd"], atol=1e-6)
    assert [f["position"] for f in c.doc["flips"]] == [f["position"] for f in want["flips"]]
    assert c.doc["flips"], "step 0 predicts otherwise at some position"
    assert jobs.identity["checkpoint"]["index"] == 0

    w.state.set_layer(1)
    jobs.set_mode("A-B")
    qtbot.waitUntil(lambda: panel.tile_rects != [], timeout=WAIT)
    image = panel.tiles.grab().toImage()
    d = a.run(ids=c.result.input_ids, request=RunRequest(use_cache=False)).attentions[1] - \
        b.run(ids=c.result.input_ids, request=RunRequest(use_cache=False)).attentions[1]
    lim = F.signed_limit(d)
    dpr = image.devicePixelRatio()
    checked = 0
    for head in (0, 3, 7):
        for q, k in ((5, 1), (8, 7), (3, 3), (2, 6)):
            x, y = panel.tile_cell(head, q, k)
            want_rgb = F.signed_rgb(d[head, q, k], lim)
            got = image.pixelColor(int(x * dpr), int(y * dpr))
            assert (got.red(), got.green(), got.blue()) == tuple(int(v) for v in want_rgb), (head, q, k)
            checked += 1
    assert checked == 12
    assert lim == pytest.approx(np.abs(d).max())
    # (2, 6) is above the diagonal: both patterns are 0 there, the map's middle (near white)
    x, y = panel.tile_cell(0, 2, 6)
    zero = image.pixelColor(int(x * dpr), int(y * dpr))
    assert d[0, 2, 6] == 0 and min(zero.red(), zero.green(), zero.blue()) > 240

    strip = panel.strip.grab().toImage()
    flipped = {f["position"] for f in c.doc["flips"]}
    for t, r in enumerate(panel.strip_cells):
        edge = strip.pixelColor(int((r.left() + 1.5) * dpr), int(r.center().y() * dpr))
        assert (edge.name() == ERROR.lower()) == (t in flipped), t
    t = min(flipped)
    hover(panel.strip, panel.strip_cells[t].center())
    tip = tip_shown(panel.strip.toolTip())  # the hover's text, as shown
    assert tip.count("flips") == 1
    flip = next(f for f in c.doc["flips"] if f["position"] == t)  # tokens as the strip labels them
    assert f"token {t} '{c.result.labels[t]}'" in tip
    assert f"A '{flip['a_token']}', B '{flip['b_token']}'" in tip
    # the summary under the strip says what its frames and bars are, and the unit of each number
    said = panel.summary.text()
    jsd = np.asarray(c.doc["heads_jsd"])
    l, h = np.unravel_index(int(np.argmax(jsd)), jsd.shape)
    assert f"moved most {head_title(int(l), int(h))} ({plain_number(jsd[l, h])} bits)" in said
    assert f"({plural(len(c.doc['flips']), 'flip')}: framed red in the strip above, each token's bar its KL)" in said


def test_the_jsd_map_focuses_a_head_and_typing_is_followed(window, qtbot, nudged):
    w = window
    open_compare(w, BSource("model", str(nudged)))
    compared(qtbot, w, TEXT)
    panel = w.compare_panel
    qtbot.waitUntil(lambda: panel.map_layout is not None, timeout=WAIT)
    from attnviz.figures import headmap

    x, y = headmap.cell_center(panel.head_map(), panel.map_layout, 1, 2)
    qtbot.mouseClick(panel.map, Qt.MouseButton.LeftButton, pos=QPointF(x, y).toPoint())
    assert w.state.focus == (1, 2)
    w.set_text(TEXT + " sat")
    c = compared(qtbot, w, TEXT + " sat")
    b = load_model(nudged)
    want = C.compare(models_pair(w.state.model, b, c.result.input_ids, C.compare_trace))
    np.testing.assert_allclose(c.doc["kld"], want["kld"], rtol=1e-5, atol=1e-7)
    assert "A:" in panel.title.text() and "mean head JSD" in panel.summary.text()


def test_a_b_that_does_not_open_changes_nothing_and_leaving_frees_b(window, qtbot, nudged, tmp_path):
    w = window
    jobs = w.worker.compare_jobs
    a = w.state.model
    open_compare(w, BSource("model", str(tmp_path / "nothing-here")))
    qtbot.waitUntil(lambda: jobs.loading is None and bool(jobs.note), timeout=WAIT)
    assert jobs.note.startswith("Could not compare with") and "\n" not in jobs.note
    assert jobs.b is None and w.state.model is a
    open_compare(w, BSource("model", "all-MiniLM-L6-v2"))  # another shape and vocabulary
    qtbot.waitUntil(lambda: jobs.loading is None and "a pair needs" in jobs.note, timeout=WAIT)
    assert "2 layers" in jobs.note and "6" in jobs.note
    assert jobs.b is None

    open_compare(w, BSource("model", str(nudged)))
    compared(qtbot, w, TEXT)
    gone = weakref.ref(jobs.b)
    panel = w.compare_panel
    panel.export(tmp_path / "cmp.png")
    side = json.loads((tmp_path / "cmp.png.json").read_text())
    cmp = side["compare"]
    assert cmp["b"]["name"] == jobs.identity["name"] and cmp["b"]["files"][0]["sha256"]
    assert cmp["b_source"] == {"kind": "model", "value": str(nudged)}
    assert cmp["heads_jsd"] == jobs.comparison.doc["heads_jsd"] and side["text"] == TEXT
    from PySide6.QtGui import QImage

    assert QImage(str(tmp_path / "cmp.png")).width() == panel.width()
    svg, _ = panel.export(tmp_path / "cmp.svg")
    assert svg.read_bytes().startswith(b"<?xml") and b"<image" in svg.read_bytes()
    panel.export(tmp_path / "map.csv")
    rows = (tmp_path / "map.csv").read_text().splitlines()
    assert rows[0] == "layer,head,jsd,jsd_max" and float(rows[1].split(",")[2]) == cmp["heads_jsd"][0][0]
    jobs.set_mode("B")
    panel.stop_button.click()
    assert jobs.b is None and jobs.comparison is None
    w.worker.wait_idle()
    # freed once the last job's delivery (queued to the main thread) has been dropped
    qtbot.waitUntil(lambda: gc.collect() is not None and gone() is None, timeout=WAIT)

    # File > Open view brings Compare back with the same B, mode and text
    w.set_text("something else")
    w.open_view(str(tmp_path / "cmp.png"))
    compared(qtbot, w, TEXT)
    assert jobs.identity["name"] == cmp["b"]["name"] and jobs.mode == "A-B"


def test_models_compare_with_offers_quantized_twins_and_checkpoints(window, qtbot):
    from attnviz.engine.reading.quantize import QUANT_TYPES

    w = window
    menu = w.menus.compare_menu
    w.menus.models_menu.aboutToShow.emit()
    assert w.menus.compare_action in w.menus.models_menu.actions()
    menu.aboutToShow.emit()
    subs = {a.text(): a.menu() for a in menu.actions() if a.menu() is not None}
    quant = subs[f"{w.state.model.name} quantized to"]
    assert tuple(a.text() for a in quant.actions()) == QUANT_TYPES
    assert len(subs["A training checkpoint"].actions()) == len(w.state.checkpoints)
    next(a for a in quant.actions() if a.text() == "Q8_0").trigger()
    compared(qtbot, w, TEXT)
    jobs = w.worker.compare_jobs
    assert jobs.identity["quantized"] == "Q8_0" and jobs.b.quantization == "Q8_0"
    assert np.max(jobs.comparison.doc["heads_jsd"]) < 1e-3


def test_the_grid_offers_a_b_and_a_minus_b_and_leaving_restores_a(window, qtbot):
    from PySide6.QtCore import QPointF

    from attnviz.figures.style import heat_table, signed_positions, signed_table

    w = window
    g, jobs = w.grid, w.worker.compare_jobs
    assert not g.mode_selector.isVisible()  # no B: no selector
    open_compare(w, BSource("checkpoint", 0))
    c = compared(qtbot, w, TEXT)
    assert g.mode_selector.isVisible()
    w.state.set_layer(1)
    g.mode_selector.buttons["A-B"].click()
    assert jobs.mode == "A-B"
    qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is c.result and g.layout_.mode == "layer",
                    timeout=WAIT)
    a, b = w.state.model, w.state.checkpoints.model(0)
    ids = c.result.input_ids
    d = a.run(ids=ids, request=RunRequest(use_cache=False)).attentions[1] - b.run(ids=ids, request=RunRequest(use_cache=False)).attentions[1]
    lim = float(np.abs(d).max())
    want = signed_positions(d, lim).astype(np.uint8)  # [n_head, T, T] indices into the diverging table
    lo, T = g.layout_, d.shape[-1]
    assert lo.pool == 1
    for i, (layer, head) in enumerate(lo.heads):
        assert layer == 1
        np.testing.assert_array_equal(g.img.image[lo.y0[i]:lo.y0[i] + T, lo.x0[i]:lo.x0[i] + T], want[head])
    np.testing.assert_array_equal(g.img.lut, signed_table())
    assert tuple(g.cbar.levels()) == pytest.approx((-lim, lim), rel=1e-6)  # the limit as it is
    assert "A \u2212 B" in g.cbar.getAxis("right").labelText
    assert g.titles()[0].startswith("A \u2212 B L1 H0")
    table = signed_table()

    def pixel(img, head, q, k):
        x, y = g.cell_center(1, head, q, k)
        wp = g.gw.mapFromScene(g.vb.mapViewToScene(QPointF(x, y)))
        px = img.pixelColor(int(wp.x() * img.devicePixelRatio()), int(wp.y() * img.devicePixelRatio()))
        return np.array([px.red(), px.green(), px.blue()])

    cells = [(h, q, k) for h in (0, 3, 7) for q, k in ((5, 1), (8, 7), (3, 3), (2, 6))]
    assert any(d[h, q, k] < -lim / 4 for h, q, k in cells) or any(d[h, q, k] > lim / 4 for h, q, k in cells)

    def painted():
        img = g.gw.grab().toImage()
        for h, q, k in cells:
            assert np.abs(pixel(img, h, q, k) - table[want[h, q, k], :3].astype(int)).max() <= 3, (h, q, k)
        return True
    qtbot.waitUntil(painted, timeout=WAIT)
    assert d[0, 2, 6] == 0 and want[0, 2, 6] == 128  # above the diagonal: 0, the map's white middle
    shown = g.readout_at(1, 3, 5, 1)  # (its minus "−", as the bars write it)
    assert "A \u2212 B" in shown and f"{d[3, 5, 1]:+.4f}".replace("-", "\u2212") in shown

    g.mode_selector.buttons["B"].click()
    qtbot.waitUntil(lambda: g.shown_mode == "B", timeout=WAIT)
    bw = b.run(ids=ids, request=RunRequest(use_cache=False)).attentions[1]
    i = lo.heads.index((1, 2))
    tile = g.img.image[lo.y0[i]:lo.y0[i] + T, lo.x0[i]:lo.x0[i] + T]
    top = c.b_attentions.max()  # the shared scale: B's own top
    assert np.abs(tile.astype(int) - (np.minimum(bw[2] * (254 / top), 254) + 1.5).astype(int)).max() <= 1
    np.testing.assert_array_equal(g.img.lut, heat_table(w.state.colormap))

    jobs.set_mode("A-B")
    qtbot.waitUntil(lambda: g.shown_mode == "A-B", timeout=WAIT)
    w.compare_panel.stop_button.click()  # leaving Compare: A again, B freed
    qtbot.waitUntil(lambda: g.shown_mode == "A", timeout=WAIT)
    assert not g.mode_selector.isVisible() and not g.titles()[0].startswith("A \u2212 B")
    np.testing.assert_array_equal(g.img.lut, heat_table(w.state.colormap))
    aw = w.state.result.attentions[1]
    tile = g.img.image[lo.y0[i]:lo.y0[i] + T, lo.x0[i]:lo.x0[i] + T]
    top = w.state.shown().shared_top()
    assert np.abs(tile.astype(int) - (np.minimum(aw[2] * (254 / top), 254) + 1.5).astype(int)).max() <= 1


def test_a_pooled_cell_of_a_minus_b_is_its_blocks_largest_difference_with_its_sign():
    from attnviz.ui.views.grid_compare import signed_pool

    d = np.zeros((1, 1, 5, 5), np.float32)
    d[0, 0, 0, 1], d[0, 0, 1, 0] = 0.2, -0.5  # block (0, 0): -0.5 is the larger
    d[0, 0, 4, 4] = 0.3  # the last, partial block
    d[0, 0, 2, 3] = 0.1
    got = signed_pool(d, 2)
    assert got.shape == (1, 1, 3, 3)
    assert got[0, 0, 0, 0] == np.float32(-0.5) and got[0, 0, 2, 2] == np.float32(0.3)
    assert got[0, 0, 1, 1] == np.float32(0.1) and got[0, 0, 0, 2] == 0


def test_a_lost_induction_head_is_not_written_at_the_threshold(window, qtbot, nudged, monkeypatch):
    """Survived and lost are decided on the strengths themselves: the panel writes each one on its
    side of the threshold (a head lost at 0.49996 against 0.5 reads 0.49996, never 0.50). The threshold
    is the Head roles panel's induction bar."""
    w = window
    n_layer, n_head = w.state.n_layer, w.state.n_head
    sides = iter(range(10))

    def strengths(run):  # A's probe run, then B's: one head lost just under the bar, one kept on it
        s = np.zeros((n_layer, n_head))
        s[0, 0], s[0, 1] = (0.56, 0.5) if next(sides) % 2 == 0 else (C.INDUCTION_THRESHOLD - 4e-5, 0.5)
        return s

    monkeypatch.setattr(C, "induction_strength", strengths)
    assert C.INDUCTION_THRESHOLD == H.THRESHOLDS["induction"] == 0.5
    open_compare(w, BSource("model", str(nudged)))
    compared(qtbot, w, TEXT)
    text = w.compare_panel.induction.text()
    assert "Induction heads on the probe (strength \u2265 0.5 in A)" in text, text
    assert "survived 1: L0 H1 0.50\u21920.50" in text, text
    assert "lost 1: L0 H0 0.56\u21920.49996" in text, text
