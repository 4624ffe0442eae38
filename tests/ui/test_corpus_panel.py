"""The Corpus panel on the real window: a scan read off the main thread, its heatmap of any
statistic, a head clicked to its examples, an example clicked into the live view (text, head,
query token), the heads' scatter focusing a head, and a scan of another model (told by the hash of
its files, not by its name) offering it."""

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from attnviz.figures.numbers import bar_ticks
from windows import WAIT, axis_labels, drain_events
from attnviz.engine.computing.request import RunRequest

TEXTS = ["the keys to the cabinet are on the table .",
         "a cat sat on the mat and a cat sat on the mat .",
         "she read the book in the house near the tree .",
         "the dog ran after the bird and the dog ran after the bird again ."]


@pytest.fixture(scope="module")
def scan_dir(tmp_path_factory):
    """A MiniLM scan of four texts, run in this process (no Dask)."""
    from attnviz.corpus.scan import scan

    root = tmp_path_factory.mktemp("scan")
    corpus = root / "c.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    scan(root / "out", "all-MiniLM-L6-v2", corpus, batch=2, examples=4, in_process=True,
         progress_stream=open("/dev/null", "w"))
    return root / "out"


def _open(window, qtbot, path):
    """File -> Open scan… with `path` chosen: the Corpus dock, and the scan once read (or None)."""
    window.open_scan(str(path))
    panel = window.corpus_panel
    got = []
    panel.sigScanRead.connect(got.append)  # the read is delivered later, on the main thread
    qtbot.waitUntil(lambda: bool(got), timeout=WAIT)
    panel.sigScanRead.disconnect(got.append)
    return panel, got[0]


def _click_view(qtbot, widget, view_box, p: QPointF):
    pos = widget.mapFromScene(view_box.mapViewToScene(p))
    qtbot.mouseClick(widget.viewport(), Qt.MouseButton.LeftButton, pos=pos)


def test_a_scan_opens_into_a_heatmap_of_any_statistic_whose_heads_list_their_examples(
        window, qtbot, scan_dir):
    from attnviz.corpus import store

    assert window.menus.open_scan_action.text() == "Open &scan…"
    assert window.menus.open_scan_action in window.menuBar().actions()[0].menu().actions()
    panel, scan = _open(window, qtbot, scan_dir)
    assert scan is not None and panel.scan is scan
    assert window.corpus_dock.isVisible() and window.corpus_dock.widget() is panel
    assert "all-MiniLM-L6-v2 · 6 layers × 12 heads · 4 of 4 texts scanned · 0 errors" in panel.status.text()
    means = store.head_means(scan_dir, 6, 12)
    np.testing.assert_allclose(panel.heat_w.img.image, np.nan_to_num(means["first_token_mass"]), rtol=1e-12)
    panel.stat_box.setCurrentIndex(panel.stat_box.findData("previous"))
    np.testing.assert_allclose(panel.heat_w.img.image, means["previous"], rtol=1e-12)
    # its colour bar writes 0 and the top as every colour bar does (the grid's, an export's)
    ends, steps = bar_ticks(0.0, float(np.nanmax(means["previous"])))
    shown = [text for text, _box in axis_labels(panel.heat_w.cbar.getAxis("right"))]
    assert [t for _, t in ends] == shown[:2] and set(shown) <= {t for _, t in ends + steps}, shown
    assert not panel.model_note.isVisible()
    # a click on head L2 H5 lists its corpus top examples, the tokens marked in the text
    _click_view(qtbot, panel.heat_w, panel.heat_w.vb, panel.cell_center(2, 5))
    assert panel.head == (2, 5) and window.state.focus == (2, 5)
    want = store.top_examples(scan_dir, 4, 2, 5)
    assert panel.examples.count() == len(want) == 4
    first = panel.examples.itemWidget(panel.examples.item(0)).text()
    e = want[0]
    assert f"<b><u>{e.key_token}</u></b>@{e.key_pos}" in first and f"@{e.query_pos}" in first
    # in the text, the spans the loaded (the scan's) tokenizer gives those positions are marked
    offsets = window.state.model.tokenizer.encode(TEXTS[e.text_id]).offsets
    (qa, qb), (ka, kb) = offsets[e.query_pos], offsets[e.key_pos]
    text = TEXTS[e.text_id]
    assert f"<b><u>{text[ka:kb]}</u></b>" in first.split("<br>")[1]
    if qb > qa and (qa, qb) != (ka, kb):  # a special token ([SEP]) has no span in the text
        assert f"<b>{text[qa:qb]}</b></span>" in first.split("<br>")[1]


def test_an_example_clicked_opens_its_text_head_and_query_in_the_live_view(window, qtbot, scan_dir):
    panel, _ = _open(window, qtbot, scan_dir)
    panel.pick_head(1, 3)
    item = panel.examples.item(1)
    e = item.data(Qt.ItemDataRole.UserRole)
    rect = panel.examples.visualItemRect(item)
    qtbot.mouseClick(panel.examples.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    st = window.state
    qtbot.waitUntil(lambda: st.result is not None and st.result.text == TEXTS[e.text_id], timeout=WAIT)
    qtbot.waitUntil(lambda: st.query_pos == e.query_pos, timeout=WAIT)
    assert window.text_box.toPlainText() == TEXTS[e.text_id]
    assert st.focus == (1, 3) and st.layer == 1
    assert st.result.labels[e.query_pos] == e.query_token
    assert st.result.labels[e.key_pos] == e.key_token
    # the live pattern gives the weight the scan stored
    assert float(st.result.attentions[1, 3, e.query_pos, e.key_pos]) == pytest.approx(e.weight, abs=1e-6)


def test_a_point_of_the_behaviour_scatter_focuses_its_head(window, qtbot, scan_dir):
    panel, scan = _open(window, qtbot, scan_dir)
    assert scan.coords.shape == (72, 2) and np.isfinite(scan.coords).all()
    d = np.linalg.norm(scan.coords[:, None] - scan.coords[None, :], axis=-1)
    i = int(np.argmax(np.sort(d, axis=1)[:, 1]))  # the most isolated head: no neighbour under the click
    layer, head = divmod(i, 12)
    vb = panel.scatter_w.plot.getViewBox()
    _click_view(qtbot, panel.scatter_w, vb, panel.point_position(layer, head))
    assert window.state.focus == (layer, head) and panel.head == (layer, head)


def test_a_scan_of_another_model_says_so_and_offers_to_load_it(window, qtbot, tmp_path):
    from attnviz.corpus.scan import scan

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\nthe dog ran\n")
    scan(tmp_path / "tb", "attnviz-textbook", corpus, in_process=True,
         progress_stream=open("/dev/null", "w"))
    panel, _ = _open(window, qtbot, tmp_path / "tb")
    assert panel.model_note.isVisible() and panel.load_button.isVisible()
    assert "made with attnviz-textbook; the window shows all-MiniLM-L6-v2" in panel.model_note.text()
    panel.pick_head(1, 2)
    assert window.state.focus != (1, 2) or window.state.model_name != "attnviz-textbook"
    before = window.state.text
    panel.open_example(panel.scan.examples[(1, 2)][0])
    assert window.state.text == before  # nothing changed in the live view
    qtbot.mouseClick(panel.load_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.state.model_name == "attnviz-textbook", timeout=WAIT)
    qtbot.waitUntil(lambda: panel.model_state() == "same", timeout=WAIT)  # its files hashed
    assert not panel.model_note.isVisible()


def _minilm_copy(folder: Path, query_scale: float | None = None) -> Path:
    """MiniLM's files linked into `folder` (its name is the model's name), or with layer 0's
    query weights scaled by `query_scale` (other weights, so other patterns)."""
    from safetensors.numpy import load_file, save_file

    from attnviz.engine.reading.registry import resolve

    _, src, _ = resolve("all-MiniLM-L6-v2")
    folder.mkdir(parents=True)
    for f in Path(src).iterdir():
        if query_scale is None or f.name != "model.safetensors":
            (folder / f.name).symlink_to(f)
    if query_scale is not None:
        w = load_file(str(Path(src) / "model.safetensors"))
        w["encoder.layer.0.attention.self.query.weight"] *= np.float32(query_scale)
        save_file(w, str(folder / "model.safetensors"))
    return folder


def _scan_of(model: Path, root: Path) -> Path:
    from attnviz.corpus.scan import scan

    corpus = root / "c.txt"
    corpus.write_text("\n".join(TEXTS[:2]) + "\n")
    scan(root / "scan", str(model), corpus, batch=2, examples=4, in_process=True,
         progress_stream=open("/dev/null", "w"))
    return root / "scan"


def test_a_scan_of_other_weights_under_the_loaded_models_name_is_another_model(window, qtbot,
                                                                              tmp_path):
    """The scan's model is told by the hash of its files: a folder named all-MiniLM-L6-v2 whose
    layer 0 queries are scaled is not the loaded all-MiniLM-L6-v2; the panel says so, keeps the
    live view, and its Load button loads that folder, after which an example opens with the
    weight the scan stored."""
    other = _minilm_copy(tmp_path / "other" / "all-MiniLM-L6-v2", query_scale=2.0)
    panel, scan = _open(window, qtbot, _scan_of(other, tmp_path))
    st = window.state
    assert scan.model_name == st.model_name == "all-MiniLM-L6-v2"
    assert panel.model_state() == "other"
    assert panel.model_note.isVisible() and panel.load_button.isVisible()
    note = panel.model_note.text()
    assert "other files under the name all-MiniLM-L6-v2" in note and scan.model_sha256[:12] in note
    e = panel.scan.examples[(0, 1)][0]
    # the loaded model's own pattern at that cell is not what the scan stored
    live = st.model.run(TEXTS[e.text_id], request=RunRequest(use_cache=False)).attentions[0, 1, e.query_pos, e.key_pos]
    assert abs(float(live) - e.weight) > 1e-3
    focus, text = st.focus, st.text
    panel.pick_head(0, 1)
    panel.open_example(e)
    assert st.focus == focus and st.text == text  # the live view is left alone
    qtbot.mouseClick(panel.load_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.model_state() == "same", timeout=WAIT)
    assert Path(st.model.path) == other and not panel.model_note.isVisible()
    panel.open_example(e)
    qtbot.waitUntil(lambda: st.result is not None and st.result.text == TEXTS[e.text_id]
                    and st.query_pos == e.query_pos, timeout=WAIT)
    assert st.focus == (0, 1)
    assert float(st.result.attentions[0, 1, e.query_pos, e.key_pos]) == pytest.approx(e.weight, abs=1e-6)


def test_a_scan_of_the_same_files_under_another_name_is_the_loaded_model(window, qtbot, tmp_path):
    """MiniLM's own files in a folder named minilm-copy: the scan records that name, and the
    panel still treats the loaded all-MiniLM-L6-v2 as the scan's model (no note; a head clicked is
    focused in the window)."""
    copy = _minilm_copy(tmp_path / "minilm-copy")
    panel, scan = _open(window, qtbot, _scan_of(copy, tmp_path))
    assert scan.model_name == "minilm-copy" != window.state.model_name
    assert panel.model_state() == "same" and not panel.model_note.isVisible()
    panel.pick_head(2, 5)
    assert window.state.focus == (2, 5)


def test_a_folder_that_is_no_scan_keeps_the_scan_shown_with_one_message(window, qtbot, scan_dir,
                                                                         tmp_path):
    panel, _ = _open(window, qtbot, scan_dir)
    assert _open(window, qtbot, tmp_path)[1] is None
    assert "has no scan.json" in panel.status.text()
    assert f"Still showing {scan_dir}" in panel.status.text()
    assert panel.scan is not None and panel.scan.path == scan_dir


def test_the_scatters_title_keys_its_layer_colours(window, qtbot, scan_dir):
    """'colour: layer' comes with its key: the first and the last layer's colour, as their points have."""
    panel, _ = _open(window, qtbot, scan_dir)
    spots = panel.scatter_w.points.points()
    first = next(p for p in spots if p.data() == (0, 0)).brush().color().name()
    last = next(p for p in spots if p.data() == (5, 0)).brush().color().name()
    title = panel.scatter_w.plot.titleLabel.text
    assert f"colour: layer, <span style='color: {first}'>\u25cf</span> L0 … " \
           f"<span style='color: {last}'>\u25cf</span> L5)" in title, title


def test_the_scatters_layer_colours_follow_the_windows_colormap(window, qtbot, scan_dir):
    """The scatter's colour is the layer, first to last through the window's colormap as the map
    beside it reads 0 to its top: a change of colormap repaints its points and the title's key in
    the new one. (It stayed viridis whatever the window showed.)"""
    from attnviz.figures.style import colormap_colors
    from windows import rgb

    panel, scan = _open(window, qtbot, scan_dir)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    sc = panel.scatter_w
    for name in ("magma", "turbo", "viridis"):
        window.state.set_colormap(name)
        drain_events()
        want = colormap_colors(name, scan.n_layer)
        image = sc.grab().toImage()
        for layer in (0, scan.n_layer - 1):
            at = _point_on_top(panel, layer)
            assert rgb(image.pixelColor(at.x(), at.y())) == tuple(int(c) for c in want[layer]), (name, layer)
            key = "#" + "".join(f"{int(c):02x}" for c in want[layer])
            assert f"<span style='color: {key}'>\u25cf</span> L{layer}" in sc.plot.titleLabel.text, name


def _point_on_top(panel, layer: int):
    """The pixel at the centre of a point of `layer` that no point drawn after it covers (points
    are drawn in layer then head order; one is 11 pixels across)."""
    sc, scan = panel.scatter_w, panel.scan
    vb = sc.plot.getViewBox()
    spots = [sc.mapFromScene(vb.mapViewToScene(panel.point_position(l, h)))
             for l in range(scan.n_layer) for h in range(scan.n_head)]
    for i in range(layer * scan.n_head, (layer + 1) * scan.n_head):
        if all((spots[i] - p).manhattanLength() > 16 for p in spots[i + 1:]):
            return spots[i]
    raise AssertionError(f"every point of layer {layer} is under another")


def test_a_heads_examples_title_wraps_in_a_1024_pixel_window(window, qtbot, scan_dir):
    """The line over a head's examples is longer than a 1024 px window's dock: it wraps, and the
    window keeps its width (picking a head does not widen it past the screen)."""
    from windows import drain_events

    window.resize(1024, 700)
    panel, _ = _open(window, qtbot, scan_dir)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    panel.pick_head(2, 5)
    drain_events()
    drain_events()
    assert panel.examples_title.text() == ("L2 H5 (mean first_token_mass 0.611): top 4 examples by weight; "
                                           "click one to open it")
    assert "diagonal" in panel.examples_title.toolTip()
    assert window.width() == 1024 and window.minimumSizeHint().width() <= 1024
    assert panel.examples_title.width() <= panel.width()


def test_a_scan_whose_texts_all_failed_says_none_was_scanned_and_why(window, qtbot, tmp_path):
    """Every text longer than the textbook model's 64 positions: the texts table holds both, yet
    neither gave a statistic; the line says 0 scanned (not '2 of 2 texts') and the first reason."""
    from attnviz.corpus.scan import scan

    corpus = tmp_path / "c.txt"
    corpus.write_text(" ".join(["the cat sat on the mat ."] * 20) + "\n" + " ".join(["the dog ran"] * 40) + "\n")
    scan(tmp_path / "out", "attnviz-textbook", corpus, batch=2, examples=2, in_process=True,
         progress_stream=open("/dev/null", "w"))
    panel, got = _open(window, qtbot, tmp_path / "out")
    assert got is not None
    assert "· 0 of 2 texts scanned · 2 errors. No text gave statistics: text 0: sequence of 141 " \
           "tokens is longer than this model's 64 positions" in panel.status.text(), panel.status.text()
    assert panel.heat_note.text() == "Map: no text gave a value (magenta)."  # (viridis: style.no_value_word)
    # the statistic box's tooltip says so too, never "its mean over the 0 scanned texts"
    assert panel.stat_box.toolTip() == ("the statistic the heatmap shows: no text gave a value "
                                        "(no text was scanned)"), panel.stat_box.toolTip()
    # no head placed by behaviour (all six were drawn on one point) and no examples offered
    assert len(panel.scatter_w.points.points()) == 0
    assert panel.scatter_w.plot.titleLabel.text == "heads by behaviour: no text gave a value"
    panel.pick_head(1, 2)
    assert panel.examples_title.text() == "L1 H2 (mean first_token_mass no value): no examples in this scan"
    assert panel.examples.count() == 0


@pytest.mark.parametrize("width, every_head", [(300, False), (1000, True)])
def test_the_heatmaps_head_labels_never_touch_in_a_narrow_dock(window, qtbot, scan_dir, width, every_head):
    """The head labels' step comes from the map's painted width and the labels' font: a narrow
    dock labels every other head or fewer, apart, not "H9H10H11"; a wide one labels every head."""
    panel, _ = _open(window, qtbot, scan_dir)
    dock = window.corpus_dock
    dock.setFloating(True)
    dock.show()
    with qtbot.waitSignal(panel.heat_w.vb.sigResized, timeout=WAIT):
        dock.resize(width, 700)
    drain_events()
    labels = axis_labels(panel.heat_w.plot.getAxis("bottom"))
    boxes = sorted((b.left(), b.right()) for _t, b in labels)
    assert len(labels) > 1
    assert all(right + 2 < left for (_l, right), (left, _r) in zip(boxes, boxes[1:])), labels
    assert (len(labels) == panel.scan.n_head) == every_head
    dock.setFloating(False)


def test_the_maps_title_and_colour_bar_numbers_are_whole_in_a_1024_pixel_window(window, qtbot, scan_dir):
    """Each statistic's map in a 1024 px window's dock: every number of its colour bar painted
    inside the map's view (a long title widened the plot and pushed the bar past the dock's edge:
    "0.7" of 0.75), and its title whole, or shortened with the whole in the map's tooltip."""
    from attnviz.engine.analysing.corpus_stats import HEAD_STATS

    window.resize(1024, 700)
    panel, _ = _open(window, qtbot, scan_dir)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    port = panel.heat_w.viewport().rect()
    for stat in HEAD_STATS:
        panel.set_stat(stat)
        drain_events()
        drain_events()
        axis = panel.heat_w.cbar.getAxis("right")
        labels = axis_labels(axis)
        assert len(labels) >= 2
        for text, box in labels:
            r = panel.heat_w.mapFromScene(axis.mapToScene(box).boundingRect()).boundingRect()
            assert port.contains(r), f"{stat}: {text!r} at {r.getRect()} outside {port.getRect()}"
        title = panel.heat_w.plot.titleLabel
        r = panel.heat_w.mapFromScene(title.item.sceneBoundingRect()).boundingRect()
        assert port.contains(r), f"{stat}: its title at {r.getRect()} outside {port.getRect()}"
        whole = f"mean {stat} per head"
        assert title.text == whole or (title.text in (f"mean {stat}",) or title.text.endswith("\u2026")) \
            and panel.heat_w.toolTip() == whole, (title.text, panel.heat_w.toolTip())
    assert window.width() == 1024


def test_a_new_statistic_keeps_the_examples_scrolled_where_they_were(window, qtbot, scan_dir):
    """The picked head's examples are the same whatever the statistic (its top cells by weight):
    the list stays scrolled where it was, and the line over it names the new statistic's mean."""
    from PySide6.QtCore import QPoint

    window.resize(1024, 700)
    panel, _ = _open(window, qtbot, scan_dir)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    panel.pick_head(2, 5)
    bar = panel.examples.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=WAIT)  # (4 examples in less room)
    bar.setValue(bar.maximum())
    drain_events()
    top = panel.examples.indexAt(QPoint(2, 2)).row()
    assert top > 0
    panel.set_stat("previous")
    drain_events()
    assert panel.examples_title.text().startswith("L2 H5 (mean previous ")
    assert bar.value() == bar.maximum() and panel.examples.indexAt(QPoint(2, 2)).row() == top


def test_both_plots_stay_inside_a_320_pixel_dock(window, qtbot, scan_dir):
    """A dock 320 px wide: the map's and the scatter's view boxes and titles lie inside their
    views (the scatter's title, wider than the dock, widened its plot past the dock's edge), the
    scatter's title still keys its layer colours, and the map's colour bar numbers are whole."""
    panel, _ = _open(window, qtbot, scan_dir)
    dock = window.corpus_dock
    dock.setFloating(True)
    dock.show()
    try:
        with qtbot.waitSignal(panel.heat_w.vb.sigResized, timeout=WAIT):
            dock.resize(320, 700)
        drain_events()
        drain_events()
        assert panel.scatter_w.width() < 320
        for gw in (panel.heat_w, panel.scatter_w):
            port = gw.viewport().rect()
            for item in (gw.plot.getViewBox(), gw.plot.titleLabel.item):
                r = gw.mapFromScene(item.sceneBoundingRect()).boundingRect()
                assert port.contains(r), f"{type(item).__name__} {r.getRect()} outside {port.getRect()}"
        assert "\u25cf</span> L0 … " in panel.scatter_w.plot.titleLabel.text
        axis = panel.heat_w.cbar.getAxis("right")
        for text, box in axis_labels(axis):
            r = panel.heat_w.mapFromScene(axis.mapToScene(box).boundingRect()).boundingRect()
            assert panel.heat_w.viewport().rect().contains(r), f"{text!r} at {r.getRect()}"
    finally:
        dock.setFloating(False)
