"""Why here? and Circuits in the real window (offscreen): a click on a cell of the focused head picks
its query row as before and the Why here? list follows the cell, with the engine's numbers, shares
that add up to the score in every list, and the cell kept by position as the text grows; hovering a
row names its heads and outlines them in the grid (painted); the Circuits tab paints the copying
map with the engine's scores and lists the focused head's partners; both export."""

import json
import re

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor

from attnviz.engine.analysing import circuits as C
from attnviz.engine.analysing.qk import qk_attribution, qk_trace
from attnviz.engine.computing.patterns import head_title
from attnviz.figures.numbers import score_text
from attnviz.ui.views.grid_items import HIGHLIGHT
from windows import WAIT, open_window, wait_for_text
from attnviz.engine.computing.request import RunRequest

TEXT = "Harry Potter met Hermione Granger. Later Harry Potter"
ROW = re.compile(r"^(.*?)  ([+\u2212]\d+\.\d+)  ([+\u2212]\d+\.\d+)%$")  # (the window's minus)
KEY_FORM = re.compile(r"\bL\d+H\d+\b")  # a head as the numbers' keys name it (L16H1)


def _as_the_grid_names(key: str) -> str:
    """A component's key as the window writes it: "L16H1" -> "L16 H1", "L3.mlp" -> "L3 MLP"."""
    return re.sub(r"^L(\d+)\.mlp$", r"L\1 MLP", re.sub(r"^L(\d+)H(\d+)$", r"L\1 H\2", key))


@pytest.fixture
def smol(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("why",))
    yield w
    w.worker.wait_idle()


def _click_focus_cell(qtbot, w, q, k):
    fv = w.focus_view
    pos = fv.gw.mapFromScene(fv.vb.mapViewToScene(QPointF(k + 0.5, q + 0.5)))
    qtbot.mouseClick(fv.gw.viewport(), Qt.MouseButton.LeftButton, pos=pos)


def _move(widget, pos):
    """A mouse move over `widget` with no button, as the platform delivers it (offscreen QTest
    moves reach no widget)."""
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    ev = QMouseEvent(QEvent.Type.MouseMove, pos, widget.mapToGlobal(pos), Qt.MouseButton.NoButton,
                     Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, ev)


def _rows(w):
    """The painted lists: [[(label, value, share)]] per section, read from the canvas' rows."""
    canvas = w.why_panel.canvas
    sections, out = [], []
    for box in canvas.lay.rows:
        label, value, share = ROW.match(box.text).groups()
        out.append((label, float(value.replace("\u2212", "-")), float(share.replace("\u2212", "-")) / 100))
        if label.startswith("the other"):
            sections.append(out)
            out = []
    return sections


def _wait_attribution(qtbot, w, cell):
    j = w.why_jobs
    qtbot.waitUntil(lambda: j.cell == cell and j.attribution is not None and not j.busy
                    and w.why_panel.canvas.lay is not None, timeout=WAIT)
    return j.attribution


def test_a_click_on_the_focused_head_explains_the_cell_and_still_picks_the_query(smol, qtbot):
    w = smol
    st = w.state
    assert not w.why_dock.isVisible()  # the first click on a cell opens it
    layer, head = 4, 3
    st.show_head(layer, head)
    qtbot.waitUntil(lambda: f"<b>{head_title(layer, head)}</b>" in w.focus_view.title.text(), timeout=WAIT)
    T = len(st.result.tokens)
    q, k = T - 1, 2
    _click_focus_cell(qtbot, w, q, k)
    assert st.query_pos == q  # the click still picks the query row
    assert w.why_dock.isVisible()
    a = _wait_attribution(qtbot, w, (layer, head, q, k))
    assert st.marked_cell == (layer, head, q, k)
    marker = w.focus_view.cell_rect  # the explained cell is framed in the focus view
    assert marker.isVisible() and marker.rect().getRect() == (k, q, 1, 1)
    # the engine on its own agrees
    trace = qk_trace()
    st.model.run(ids=st.result.input_ids, trace=trace, request=RunRequest(truncate=True))
    ref = qk_attribution(st.model, trace, layer, head, q, k)
    assert a.components == ref.components
    np.testing.assert_allclose(a.table, ref.table, rtol=1e-9, atol=1e-9)
    sections = _rows(w)
    assert len(sections) == 3
    for rows in sections:  # each list ends with what it leaves out: it adds up to the score
        assert sum(v for _, v, _ in rows) == pytest.approx(a.total(), abs=5e-4 * len(rows))
        assert sum(s for _, _, s in rows) == pytest.approx(1.0, abs=5e-3)
    top = ref.top(8)
    assert [lab for lab, _, _ in sections[0][:8]] == [f"{_as_the_grid_names(qc)} · {_as_the_grid_names(kc)}"
                                                      for qc, kc, _ in top]
    assert [v for _, v, _ in sections[0][:8]] == pytest.approx([v for _, _, v in top], abs=5e-4)
    qs = sorted(range(len(ref.components)), key=lambda i: -abs(ref.query_side[i]))[:6]
    assert [lab for lab, _, _ in sections[1][:6]] == [_as_the_grid_names(ref.components[i]) for i in qs]
    assert any(KEY_FORM.search(c) for c in ref.components)  # (the keys keep their form: L16H1)
    assert not [box.text for box in w.why_panel.canvas.lay.rows if KEY_FORM.search(box.text)]
    title = w.why_panel.view().title()
    assert head_title(layer, head) in title and f"({q})" in title and f"({k})" in title

    # closed by the user, a later click leaves it closed (and still picks the query row)
    w.why_dock.close()
    _click_focus_cell(qtbot, w, q - 1, k)
    assert st.query_pos == q - 1 and not w.why_dock.isVisible()
    w.why_dock.show()
    qtbot.waitUntil(lambda: w.why_jobs.cell == (layer, head, q - 1, k), timeout=WAIT)
    _click_focus_cell(qtbot, w, q, k)
    a = _wait_attribution(qtbot, w, (layer, head, q, k))

    # typing on: the cell is kept by position and recomputed on the new text
    new = TEXT + " and"
    w.set_text(new)
    wait_for_text(qtbot, w, new)
    # until the rerun the old numbers are shown (and exported) with the old text, never the new one
    assert w.why_panel.view().text == (TEXT if w.why_jobs.attribution is a else new)
    qtbot.waitUntil(lambda: w.why_jobs.attribution is not None and not w.why_jobs.busy
                    and w.why_panel.view().text == new, timeout=WAIT)
    assert w.why_jobs.cell == (layer, head, q, k)
    # a cell past the end of a shorter text is dropped, with a line that says so
    w.set_text("Harry")
    wait_for_text(qtbot, w, "Harry")
    qtbot.waitUntil(lambda: w.why_jobs.cell is None, timeout=WAIT)
    assert "gone" in w.why_panel.note.text()


def test_why_here_from_the_cells_menu_opens_the_panel_at_that_cell(smol, qtbot):
    from attnviz.ui.panels.why_panel import focus_menu

    w = smol
    assert not w.why_dock.isVisible()  # closed until a cell asks for it
    T = len(w.state.result.tokens)
    cell = (5, 4, T - 1, 1)
    menu = focus_menu(w, w.why_jobs, w.why_dock, cell)
    why, pick = menu.actions()
    assert why.text().startswith("Why here?")
    why.trigger()
    assert w.why_dock.isVisible()
    _wait_attribution(qtbot, w, cell)
    assert w.why_panel.canvas.lines()
    pick.trigger()  # the menu's other item picks the query row, as a click does
    assert w.state.query_pos == T - 1


def test_with_a_head_switched_off_the_cell_is_explained_on_the_changed_run(smol, qtbot):
    w = smol
    st = w.state
    layer, head = 4, 3
    st.show_head(layer, head)
    q, k = len(st.result.tokens) - 1, 2
    _click_focus_cell(qtbot, w, q, k)
    clean = _wait_attribution(qtbot, w, (layer, head, q, k))
    i = clean.components.index("L2H1")
    assert abs(clean.query_side[i]) > 1e-3  # the head has a part to lose
    st.effects.toggle_head(2, 1)  # zero ablation, as Alt+click does
    qtbot.waitUntil(lambda: st.effects.run_of(st.result) is not None and w.why_jobs.attribution is not None
                    and w.why_jobs.attribution is not clean and not w.why_jobs.busy, timeout=WAIT)
    a = w.why_jobs.attribution
    assert a.query_side[i] == 0.0 and a.key_side[i] == 0.0  # the switched-off head gives nothing
    assert a.score != pytest.approx(clean.score, abs=1e-3)  # and the score is the changed run's
    assert a.total() == pytest.approx(a.score, abs=1e-4)


def test_a_key_after_the_query_gets_one_line(smol, qtbot):
    w = smol
    w.why_dock.show()
    w.state.show_head(2, 0)
    qtbot.waitUntil(lambda: "<b>L2 H0</b>" in w.focus_view.title.text(), timeout=WAIT)
    _click_focus_cell(qtbot, w, 1, 3)
    qtbot.waitUntil(lambda: "comes after query" in w.why_panel.note.text(), timeout=WAIT)
    assert w.why_panel.canvas.lines() == []


def test_hovering_a_component_outlines_its_head_in_the_grid(smol, qtbot):
    w = smol
    st = w.state
    st.set_view_mode("all")  # every layer's heads on screen
    w.why_dock.show()
    T = len(st.result.tokens)
    w.why_jobs.set_cell(6, 1, T - 1, 3)
    _wait_attribution(qtbot, w, (6, 1, T - 1, 3))
    canvas = w.why_panel.canvas
    box = next(b for b in canvas.lay.rows if b.row.components and re.match(r"L\d+H\d+$", b.row.components[0])
               and len(b.row.components) == 1)
    layer, head = map(int, re.match(r"L(\d+)H(\d+)", box.row.components[0]).groups())
    assert box.row.label == head_title(layer, head)  # named as the grid names it
    _move(canvas, box.rect.center())
    qtbot.waitUntil(lambda: st.outlined == ((layer, head),), timeout=WAIT)
    assert w.grid.outline.item.isVisible()
    # painted: the outline's colour just outside the head's tile, where the grid has background
    grid = w.grid
    from attnviz.ui.views.mosaic import tile_index

    lo = grid.layout_
    i = tile_index(lo, layer, head)
    m = max(1.0, 0.06 * lo.T)
    img = grid.gw.grab().toImage()
    found = 0
    for t in np.linspace(0.1, 0.9, 9):
        p = grid.gw.mapFromScene(grid.vb.mapViewToScene(QPointF(lo.x0[i] + t * lo.T, lo.y0[i] - m)))
        for dy in (-1, 0, 1):
            c = QColor(img.pixel(p.x(), p.y() + dy))
            found += abs(c.red() - HIGHLIGHT.red()) < 40 and abs(c.green() - HIGHLIGHT.green()) < 40 \
                and c.blue() < 90
    assert found >= 5
    _move(canvas, QPointF(2, 2))  # off the rows (the title): the outline goes
    qtbot.waitUntil(lambda: not w.grid.outline.item.isVisible(), timeout=WAIT)


def test_the_why_list_exports_as_image_and_numbers(smol, qtbot, tmp_path):
    w = smol
    w.why_dock.show()
    T = len(w.state.result.tokens)
    w.why_jobs.set_cell(3, 2, T - 1, 0)
    a = _wait_attribution(qtbot, w, (3, 2, T - 1, 0))
    png, side = w.why_panel.export_to(str(tmp_path / "why.png"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    meta = json.loads(side.read_text())
    assert meta["view"] == "why" and meta["layer"] == 3 and meta["head"] == 2
    from attnviz.figures.data import open_sidecar

    assert open_sidecar(side)["text"] == w.state.result.text  # File -> Open view reads it
    (js,) = w.why_panel.export_to(str(tmp_path / "why.json"))
    doc = json.loads(js.read_text())
    assert doc["score"] == pytest.approx(a.score)
    assert np.sum(doc["table"]) == pytest.approx(a.score, rel=1e-4)
    assert len(doc["top"]) == 20


def test_the_circuits_tab_paints_the_copying_map_and_the_partners(qtbot, tmp_path, toy):
    from attnviz.engine.reading.registry import TOY_MODEL

    w = open_window(qtbot, tmp_path / "t.ini", model=TOY_MODEL, text="abcabc", panels=("why",))
    st = w.state
    panel = w.circuits_panel
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    qtbot.waitUntil(lambda: w.circuits_jobs.circuits is not None, timeout=WAIT)
    ref = C.circuits(st.model)
    np.testing.assert_allclose(w.circuits_jobs.circuits.copying, ref.copying)
    assert not panel.note.isVisibleTo(panel)  # GPT-2 has no RoPE for the scores to leave out
    L, H = ref.copying.shape
    st.show_head(L - 1, 0)
    qtbot.waitUntil(lambda: "top partners" in panel.partners.text(), timeout=WAIT)
    rank = int((ref.copying > ref.copying[L - 1, 0]).sum()) + 1  # the copying rank reads its direction
    assert f"rank {rank} of {L * H} heads (1: the highest)" in panel.partners.text()
    best = ref.composition["k"][:L - 1, :, L - 1, 0]
    l1, h1 = np.unravel_index(int(np.argmax(best)), best.shape)
    assert f"{head_title(int(l1), int(h1))} {score_text(best[l1, h1])}" in panel.partners.text()
    # the map is painted: each head's cell in its colour
    view = panel.map_view
    qtbot.waitUntil(lambda: view.map is not None and view.width() > 50, timeout=WAIT)
    img = view.grab().toImage()
    from attnviz.figures.headmap import colour

    for l in range(L):
        for h in range(H):
            x, y = view.cell_center(l, h)
            want = colour(float(ref.copying[l, h]), view.map.limit)
            got = QColor(img.pixel(int(x), int(y)))
            assert abs(got.red() - want.red()) + abs(got.green() - want.green()) + abs(got.blue() - want.blue()) < 12
    # a token picked in the strip: what the focused head writes for it
    st.set_query(1)
    qtbot.waitUntil(lambda: "writes, in logits:" in panel.ov.text(), timeout=WAIT)
    key = int(np.argmax(st.result.attentions[L - 1, 0, 1]))  # (the head's top key at the query)
    top = C.ov_top(st.model, L - 1, 0, int(st.result.input_ids[key]), 10)
    assert f"'{top[0][1]}'" in panel.ov.text()
    png, side = panel.export_to(str(tmp_path / "c.png"))
    np.testing.assert_allclose(json.loads(side.read_text())["copying"], ref.copying)
    (csv,) = panel.export_to(str(tmp_path / "c.csv"))
    assert csv.read_text().splitlines()[0] == "layer," + ",".join(f"H{h}" for h in range(H))
    w.worker.wait_idle()
