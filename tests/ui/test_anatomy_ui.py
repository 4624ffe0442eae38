"""The Anatomy panel in the real window (offscreen) and its export: one focus shared with the grid,
the layer inputs computed only while the tab is shown, hover read-outs with real numbers, click to
focus, PNG/SVG pixels (the headless `attnviz export --view anatomy`: tests/cli/test_anatomy_cli.py)."""

import json

import numpy as np
import pytest
from PySide6.QtCore import QPointF, QSettings, Qt
from PySide6.QtGui import QImage

from attnviz.figures import anatomy as fig
from attnviz.figures.style import heat_index, heat_table
from attnviz.figures.write import export_view
from attnviz.ui.app import create_window
from windows import widget
from attnviz.engine.computing.request import RunRequest

WAIT = 30000
TEXT = "The keys to the cabinet are on the table."


@pytest.fixture
def window(qtbot, tmp_path):
    w = create_window(model="all-MiniLM-L6-v2", text=TEXT,
                   settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready
                    and w.anatomy_panel is not None, timeout=WAIT)
    yield w
    w.worker.wait_idle()


def show_anatomy(qtbot, w):
    w.anatomy_dock.raise_()
    qtbot.waitUntil(lambda: w.state.result.layer_inputs is not None
                    and w.anatomy_panel.canvas.lay is not None, timeout=WAIT)
    return w.anatomy_panel


def drawn(qtbot, panel):
    """Wait for the panel's redraw (one per turn of the event loop)."""
    qtbot.waitUntil(lambda: not panel.pending, timeout=WAIT)


def test_hidden_tab_computes_nothing_and_shown_tab_keeps_the_layer_inputs(window, qtbot):
    assert not window.anatomy_panel.shown and not window.state.inputs_wanted
    assert window.state.result.layer_inputs is None  # typing while hidden: the default run
    panel = show_anatomy(qtbot, window)
    assert panel.shown and window.state.inputs_wanted
    window.focus_dock.raise_()
    qtbot.waitUntil(lambda: not panel.shown, timeout=WAIT)
    window.set_text("Cats sleep.")
    qtbot.waitUntil(lambda: window.state.result.text == "Cats sleep.", timeout=WAIT)
    assert window.state.result.layer_inputs is None and panel.canvas.view.text == TEXT  # not redrawn
    show_anatomy(qtbot, window)  # shown again: the new text's inputs, and its drawing
    qtbot.waitUntil(lambda: panel.canvas.view.text == "Cats sleep.", timeout=WAIT)


def test_focus_is_one_selection_shared_with_the_grid(window, qtbot):
    st = window.state
    panel = show_anatomy(qtbot, window)
    st.set_layer(2)
    st.set_focus(2, 7)  # a click in the grid
    drawn(qtbot, panel)
    canvas = panel.canvas
    assert canvas.view.layer == 2 and canvas.view.head == 7
    wq = canvas.lay.block("w_q")
    dh = 32
    lit = [b for b in wq.bands if b.head == 7]
    assert lit and (lit[0].i0, lit[0].i1) == (7 * dh, 8 * dh)
    # click head 3's slice of W_Q: the grid focuses head 3
    x = wq.rect.left() + wq.rect.width() * (3.5 * dh) / wq.data.shape[1]
    y = wq.rect.center().y()
    qtbot.mouseClick(canvas, Qt.MouseButton.LeftButton, pos=QPointF(x, y).toPoint())
    assert st.focus == (2, 3)
    drawn(qtbot, panel)
    assert canvas.view.head == 3 and "L2 H3" in [t.split("  ")[0] for t in window.grid.titles()]  # on the grid
    # the pixels: head 3's slice outline is the focus colour now
    img = canvas.grab().toImage()
    strip_y = int(wq.rect.top() - 1.5 * canvas.lay.scale)
    c = img.pixelColor(int(x), strip_y)
    assert c.name() == fig.FOCUS


def test_the_status_counts_layers_as_the_layer_box_does(window, qtbot):
    """Layers are numbered from 0: the last one reads 'Layer 5 (0–5)', as the layer box beside the
    grid says, not 'Layer 5 of 6' (read as one short of the last)."""
    st = window.state
    panel = show_anatomy(qtbot, window)
    last = st.model.config.n_layer - 1
    st.set_layer(last)
    drawn(qtbot, panel)
    qtbot.waitUntil(lambda: panel.canvas.view.layer == last, timeout=WAIT)
    assert panel.status.text().startswith(f"Layer {last} (0–{last}): ")
    assert widget(window, "layer_spin").text() == f"Layer {last} (0–{last})"


def test_hover_gives_shape_bytes_and_the_value_under_the_cursor(window, qtbot):
    st = window.state
    panel = show_anatomy(qtbot, window)
    st.set_focus(st.layer, 1)
    drawn(qtbot, panel)
    canvas = panel.canvas
    wk = canvas.lay.block("w_k")
    r = wk.rect
    x, y = r.left() + r.width() * 0.6, r.top() + r.height() * 0.25
    i, j = wk.index_at(x, y)
    text = canvas.text_at(x, y)
    value = float(st.model.weights.layers[st.layer].w_qkv[i, 384 + j])
    assert "W_K" in text and "[384, 384] float32, 576 KiB" in text and f"{value:.4g}" in text
    assert f"head {j // 32}" in text
    pat = canvas.lay.block("pattern")
    x, y = pat.rect.left() + pat.rect.width() * 2.5 / 12, pat.rect.top() + pat.rect.height() * 6.5 / 12
    text = canvas.text_at(x, y)
    assert "'are' \u2192 'keys'" in text
    assert f"{float(st.result.attentions[st.layer, 1, 6, 2]):.4g}" in text


def test_value_weighted_grid_equals_a_direct_computation(window, qtbot, minilm):
    st = window.state
    assert not st.value_weighted and not widget(window, "value_check").isChecked()  # off by default
    widget(window, "value_check").setChecked(True)
    qtbot.waitUntil(lambda: st.result.value_norms is not None, timeout=WAIT)
    r = minilm.run(TEXT, request=RunRequest(values=True))
    a, n = r.attentions.astype(np.float64), r.value_norms.astype(np.float64)
    direct = a * n[:, :, None, :]
    direct /= direct.sum(-1, keepdims=True)
    np.testing.assert_allclose(st.shown().region().values, direct, atol=1e-5)
    assert window.anatomy_panel.value_check.isChecked()  # the panel's box is a view of the same state
    assert "% out" in window.grid.titles()[0]
    st.set_focus(st.layer, 4)
    assert f"{100 * r.head_share[st.layer, 4]:.0f}% of the layer" in window.focus_view.title.text()
    st.set_hide_first(True)  # both together: weighted, then the first key dropped and renormalised
    d = direct[..., 1:] / direct[..., 1:].sum(-1, keepdims=True)
    np.testing.assert_allclose(st.shown().region().values, d, atol=1e-5)


def test_the_anatomy_shares_equal_the_engines(minilm):
    r = minilm.run(TEXT, request=RunRequest(values=True, inputs=True))
    for layer in range(minilm.config.n_layer):
        view = fig.make_anatomy_view(minilm, r, layer, 0)
        np.testing.assert_allclose(view.share, r.head_share[layer], rtol=1e-4, atol=1e-6)


def _png(path):
    img = QImage(str(path))
    assert not img.isNull()
    return img


def test_png_and_svg_export_draw_the_real_weights(qapp, minilm, tmp_path):
    r = minilm.run(TEXT, request=RunRequest(inputs=True))
    view = fig.make_anatomy_view(minilm, r, 3, 5)
    written = export_view(view, tmp_path / "a.png", width=1280)
    img = _png(written[0])
    lay = fig.layout(view, 1280)
    assert (img.width(), img.height()) == (lay.width, lay.height)
    side = json.loads((tmp_path / "a.png.json").read_text())
    assert side["view"] == "anatomy" and side["layer"] == 3 and side["head"] == 5
    # the pattern block's cells are the head's weights through the colormap
    pat = lay.block("pattern")
    lut = heat_table("viridis")
    p = r.attentions[3, 5]
    T = p.shape[0]
    for q, k in ((0, 0), (6, 2), (T - 1, T - 1)):
        x = pat.rect.left() + (k + 0.5) * pat.rect.width() / T
        y = pat.rect.top() + (q + 0.5) * pat.rect.height() / T
        c = img.pixelColor(int(x), int(y))
        want = lut[heat_index(p[q, k], p.max())]
        assert abs(c.red() - int(want[0])) <= 2 and abs(c.green() - int(want[1])) <= 2
    # the input x and the attention output: each cell its value through the signed scale
    for key, arr in (("x", view.anatomy.x), ("out", view.anatomy.out)):
        blk = lay.block(key)
        rgb = fig.signed_rgb(arr, fig.signed_limit(arr))
        n_r, n_c = arr.shape
        for i, j in ((0, 0), (6, 100), (n_r - 1, n_c - 1), (3, int(np.argmax(np.abs(arr[3]))))):
            x = blk.rect.left() + (j + 0.5) * blk.rect.width() / n_c
            y = blk.rect.top() + (i + 0.5) * blk.rect.height() / n_r
            c = img.pixelColor(int(x), int(y))
            assert max(abs(c.red() - int(rgb[i, j, 0])), abs(c.green() - int(rgb[i, j, 1])),
                       abs(c.blue() - int(rgb[i, j, 2]))) <= 2, (key, i, j)
    # SVG: the same figure as XML with the captions as text
    svg = export_view(view, tmp_path / "a.svg", width=1280)[0].read_text()
    assert svg.startswith("<?xml") and "W_Q [384, 384]" in svg and "<image" in svg
    assert f'width="{lay.width}' in svg or f"width=\"{lay.width}" in svg


def test_last_layer_output_is_computed_not_missing(qapp, smollm2):
    r = smollm2.run("Dr Zorblax met Mrs Okkadine. Later, Dr Zorblax thanked Mrs Okkadine.",
                    request=RunRequest(inputs=True))
    last = smollm2.config.n_layer - 1
    view = fig.make_anatomy_view(smollm2, r, last, 4)
    assert any("last layer" in n for n in view.notes)
    assert np.isfinite(view.anatomy.out).all() and np.abs(view.anatomy.out).max() > 0
    lay = fig.layout(view, 900)
    assert lay.block("w_k").rect.width() < lay.block("w_q").rect.width() / 2  # 3 KV heads of 9
    assert [b.head for b in lay.block("w_k").bands] == [0, 1, 2]


def test_the_painted_cost_table_counts_the_pairs_each_query_reads(qapp, minilm, smollm2):
    """The FLOPs drawn, counted by hand: an encoder's query reads all T keys, a causal one its t + 1;
    the total is the projections, q\u00b7k\u1d40, weights\u00b7V and W_O at 2 FLOPs a multiply-add."""
    from attnviz.engine.calc import format_count

    for model, pairs_of, label in ((minilm, lambda T: T * T, "all T\u00b2 pairs"),
                                   (smollm2, lambda T: T * (T + 1) // 2, "causal: T(T+1)/2 pairs")):
        cfg, r = model.config, model.run(TEXT, request=RunRequest(inputs=True))
        T = len(r.tokens)
        d, nh, nkv, dh, P = cfg.d_model, cfg.n_head, cfg.n_kv_head, cfg.d_head, pairs_of(T)
        lay = fig.layout(fig.make_anatomy_view(model, r, 1, 0), 1280)
        cells = [text for _r, text, *_ in lay.table]
        for what in ("q\u00b7k\u1d40", "weights\u00b7V"):
            i = cells.index(f"{what}, {label} (FLOPs)")
            assert cells[i + 1:i + 4] == [format_count(2 * P * dh), format_count(2 * P * nh * dh),
                                          format_count(2 * P * d)], (model.name, what)
        total = 2 * T * d * (nh + 2 * nkv) * dh + 2 * 2 * P * nh * dh + 2 * T * nh * dh * d
        painted = " ".join(" ".join(t.text for t in lay.texts).split())
        assert f"and {format_count(total)} FLOPs for all {nh} heads" in painted, model.name
        assert "biases, RoPE and the softmax not included" in painted


def test_a_shared_kv_heads_share_per_head_is_written_to_the_nearest_byte(qapp, smollm2):
    """SmolLM2's KV head is shared by 3 query heads: one head's share of the KV cache per token is
    2 x 64 x 4 / 3 = 170.67 bytes, painted as 171 bytes (not 170, the share rounded down)."""
    r = smollm2.run(TEXT, request=RunRequest(inputs=True))
    lay = fig.layout(fig.make_anatomy_view(smollm2, r, 1, 0), 1280)
    cells = [text for _r, text, *_ in lay.table]
    i = cells.index("KV cache per token (bytes)")
    assert cells[i + 1:i + 4] == ["171 bytes", "1.5 KiB", "4.5 KiB"], cells[i:i + 4]


def test_shown_with_nothing_computed_says_so(qtbot):
    from attnviz.ui.panels.anatomy_panel import AnatomyPanel
    from attnviz.ui.machinery.state import AppState

    st = AppState()
    panel = AnatomyPanel(st)
    qtbot.addWidget(panel)
    panel.set_shown(True)  # no model, no result: an empty canvas and a line saying why
    assert panel.canvas.view is None and "No result" in panel.status.text()
    panel.set_shown(True)


@pytest.fixture
def export_settings():
    """The dialog remembers its choices in QSettings("attnviz", "attnviz"): put them back after."""
    s = QSettings("attnviz", "attnviz")
    saved = {k: s.value(k) for k in s.allKeys() if k.startswith("export/")}
    yield
    for k in [k for k in s.allKeys() if k.startswith("export/")]:
        s.remove(k)
    for k, v in saved.items():
        s.setValue(k, v)
    s.sync()


def test_export_dialog_writes_the_anatomy_of_the_current_layer(window, qtbot, tmp_path,
                                                                export_settings):
    from attnviz.ui.export import ExportDialog

    st = window.state
    st.set_layer(4)
    st.set_focus(4, 9)
    assert st.result.layer_inputs is None  # the tab is hidden: the export runs for them itself
    dlg = ExportDialog(st, window)
    qtbot.addWidget(dlg)
    dlg.scope.setCurrentIndex(dlg.scope.findData("anatomy"))
    dlg.format.setCurrentIndex(dlg.format.findData("png"))
    assert dlg.path_edit.text().endswith("_L4_anatomy.png")
    dlg.path_edit.setText(str(tmp_path / "an.png"))
    dlg.width_box.setValue(800)
    assert dlg.do_export(), dlg.error.text()
    side = json.loads((tmp_path / "an.png.json").read_text())
    assert (side["view"], side["layer"], side["head"]) == ("anatomy", 4, 9)
    img = _png(tmp_path / "an.png")
    wq = next(b for b in side["blocks"] if b["block"] == "w_q")
    c = img.pixelColor(int(wq["x"] + wq["w"] * 9.5 / 12), int(wq["y"] - 1))
    assert c.name() == fig.FOCUS
    dlg2 = ExportDialog(st, window)
    qtbot.addWidget(dlg2)
    dlg2.scope.setCurrentIndex(dlg2.scope.findData("anatomy"))
    dlg2.format.setCurrentIndex(dlg2.format.findData("csv"))
    dlg2.path_edit.setText(str(tmp_path / "an.csv"))
    assert not dlg2.do_export() and ".png or .svg" in dlg2.error.text()


def test_new_weights_under_the_same_name_are_coloured_afresh(qtbot, tmp_path):
    """A training checkpoint swaps the weights and keeps the model's name: no stale colours."""
    from attnviz.engine import load_model
    from attnviz.ui.panels.anatomy_panel import AnatomyPanel
    from attnviz.ui.machinery.state import AppState
    from tiny import tiny_llama

    a = load_model(tiny_llama(tmp_path / "a" / "m", seed=0))
    b = load_model(tiny_llama(tmp_path / "b" / "m", seed=1))  # a checkpoint: new weights, same name
    assert a.name == b.name
    ids = [3, 1, 4, 1, 5]

    def canvas():
        panel = AnatomyPanel(AppState())
        qtbot.addWidget(panel)
        panel.canvas.resize(500, 400)
        return panel.canvas

    shown = canvas()
    shown.set_view(fig.make_anatomy_view(a, a.run(ids=ids, request=RunRequest(inputs=True)), 0, 1))
    before = shown.grab().toImage()
    view_b = fig.make_anatomy_view(b, b.run(ids=ids, request=RunRequest(inputs=True)), 0, 1, previous=shown.view)
    assert view_b.weights is b.weights  # not the previous view's numbers
    shown.set_view(view_b)
    fresh = canvas()  # b's view on a canvas that never drew a
    fresh.set_view(fig.make_anatomy_view(b, b.run(ids=ids, request=RunRequest(inputs=True)), 0, 1))
    after = shown.grab().toImage()
    assert after == fresh.grab().toImage() and after != before


def test_at_the_default_dock_width_and_a_16_px_font_nothing_is_cut_and_text_matches_the_prose(
        qtbot, tmp_path):
    """The Anatomy tab at the window's default dock width, with a 16 px UI font: every cost table
    cell (row names, numbers, notes) and every caption is painted whole, not elided or clipped, and
    the figure's text is the size of the panel's prose (notes at least 0.8 of it), not half."""
    from PySide6.QtGui import QFont, QFontInfo, QFontMetricsF
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    old = app.font()
    big = QFont(old)
    big.setPixelSize(16)
    app.setFont(big)
    try:
        w = create_window(model="all-MiniLM-L6-v2", text=TEXT,
                          settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
        qtbot.addWidget(w)
        w.show()
        qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
        # the new docks are tabbed behind Focus head once the window has laid them out
        qtbot.waitUntil(lambda: w.anatomy_dock in w.tabifiedDockWidgets(w.focus_dock), timeout=WAIT)
        panel = show_anatomy(qtbot, w)
        drawn(qtbot, panel)
        canvas, lay = panel.canvas, panel.canvas.lay
        assert canvas.width() <= 480  # the default dock, not a wide one
        prose = QFontInfo(panel.definition.font()).pixelSize()
        assert prose == 16
        names = [f"{r.what} ({r.unit})" for r in panel.canvas.view.costs]
        cells = [(rect, text, font) for rect, text, font, _c, _a in lay.table]
        for rect, text, font in cells:
            assert "\u2026" not in text
            assert QFontMetricsF(font).horizontalAdvance(text) <= rect.width() + 0.5, text
            assert rect.right() <= lay.width
        painted = " ".join(text for _r, text, _f in cells)
        for name in names:  # each row name whole, on one line or wrapped over two
            assert " ".join(name.split()) in " ".join(painted.split()), name
        for t in lay.texts:
            assert QFontMetricsF(t.font).horizontalAdvance(t.text) <= t.rect.width() + 0.5, t.text
        for b in lay.blocks:
            if b.caption:
                right = min([o.rect.x() for o in lay.blocks if o.caption and o.rect.x() > b.rect.x()
                             and abs(o.rect.y() - b.rect.y()) < 1] + [lay.width])
                assert QFontMetricsF(lay.caption_font(b)).horizontalAdvance(b.caption) <= right - b.rect.x()
        notes = [t.font.pixelSize() for t in lay.texts]
        assert min(notes) >= 0.8 * prose and max(notes) <= 1.5 * prose
        assert min(f.pixelSize() for _r, _t, f in cells) >= 0.8 * prose
        img = canvas.grab().toImage()  # and it is what the panel paints: its cost table is not blank
        rect = cells[len(cells) // 2][0]
        ys = range(int(rect.top()), int(rect.bottom()))
        assert any(img.pixelColor(x, y).lightness() < 128 for y in ys for x in range(int(rect.left()),
                                                                                     int(rect.right())))
        w.worker.wait_idle()
        w.close()
    finally:
        app.setFont(old)
