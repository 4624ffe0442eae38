"""The window's widgets act through the state: a generation's new tokens are a range the state
carries (text_marks) and the sentence box paints them itself, with or without the Generate panel;
the panels ask the state for work (a generation, the lens grid, the ablation scan) and the
runner's answer comes back there."""

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QTextCursor

from attnviz.engine.analysing.samples import SAMPLES
from attnviz.engine.computing.generate import generate
from attnviz.engine.reading import textbook
from attnviz.ui.app import assemble
from attnviz.ui.machinery.long_jobs import new_text
from attnviz.ui.panels.generate_panel import GeneratePanel
from attnviz.ui.panels.predict_panel import PredictPanel
from attnviz.ui.views.controls import TEXT_MARK, SentenceBox
from attnviz.ui.views.focus import FocusView
from attnviz.ui.views.grid import HeatmapGrid
from attnviz.ui.views.grid_items import HIGHLIGHT
from attnviz.ui.views.guide import GuideBar
from attnviz.ui.views.mosaic import tile_index
from windows import WAIT, open_window, widget

PROMPT = "the cat sat"


@pytest.fixture
def app(qtbot):
    """The app's state and runner on the textbook decoder, the prompt computed."""
    st, worker = assemble(debounce_ms=2)
    worker.load(textbook.TEXTBOOK_NAME)
    qtbot.waitUntil(lambda: st.model is not None, timeout=WAIT)
    st.set_text(PROMPT)
    yield st, worker
    st.generation.stop()
    worker.wait_idle(WAIT)


def marked_pixels(box, a: int, b: int) -> tuple[int, int]:
    """(pixels of the mark's colour over the base in the box's characters a..b, pixels in all)."""
    img = box.viewport().grab().toImage()
    base, mark = box.palette().base().color(), TEXT_MARK
    alpha = mark.alphaF()
    want = [round(getattr(base, c)() * (1 - alpha) + getattr(mark, c)() * alpha)
            for c in ("red", "green", "blue")]
    cur = QTextCursor(box.document())
    cur.setPosition(a)
    left = box.cursorRect(cur)
    cur.setPosition(b)
    right = box.cursorRect(cur)
    assert left.top() == right.top(), "the span is on one line"
    hits = total = 0
    for y in range(left.top() + 1, left.bottom()):
        for x in range(left.left() + 1, right.left() - 1):
            px = QColor(img.pixel(x, y))
            total += 1
            hits += all(abs(v - w) <= 3 for v, w in zip((px.red(), px.green(), px.blue()), want))
    return hits, total


def test_the_sentence_box_paints_the_generated_range_the_state_carries(app, qtbot):
    """No Generate panel at all: a generation asked of the state grows the text, the state says
    which characters are new, and the box paints exactly those; an edit drops the marks."""
    st, _worker = app
    gen = st.generation
    box = SentenceBox(st)
    qtbot.addWidget(box)
    box.resize(600, box.height())
    box.show()
    assert box.toPlainText() == PROMPT  # (the state's text is written into the box)
    gen.request(3)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 3, timeout=WAIT)
    want = generate(st.model, PROMPT, max_new=3)
    text = new_text(st.model, PROMPT, want.prompt_ids, want.new_ids)
    assert len(text) > len(PROMPT) and box.toPlainText() == st.text == text
    assert st.text_marks == ((len(PROMPT), len(text)),)
    sels = box.extraSelections()
    assert len(sels) == 1 and sels[0].cursor.selectedText() == text[len(PROMPT):]
    hits, total = marked_pixels(box, len(PROMPT), len(text))
    assert total and hits > total // 3  # the new characters sit on the mark's colour
    assert marked_pixels(box, 0, len("the cat"))[0] == 0  # the prompt does not

    box.setPlainText(PROMPT + " down")  # typing: the text is no longer the generated one
    assert st.text_marks == () and box.extraSelections() == []
    assert marked_pixels(box, len(PROMPT), len(PROMPT + " down"))[0] == 0


def test_the_generate_panel_asks_the_state_and_shows_the_runners_refusal(app, qtbot):
    """The panel is built on the state alone; what it asks for reaches the runner through the
    state, and a request the runner refuses comes back there, one line in the panel."""
    st, _worker = app
    panel = GeneratePanel(st)
    qtbot.addWidget(panel)
    gen = st.generation
    heard = []
    gen.sigStartWanted.connect(heard.append)
    panel.n_spin.setValue(2)
    panel.start()
    assert [r.max_new for r in heard] == [2]
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 2, timeout=WAIT)
    assert panel.status.text() == "2 new tokens: made the tokens asked for."

    gen.request(2, temperature=0.5, top_p=0.0)  # a top-p the engine refuses before any step
    assert not gen.running and len(gen.steps) == 2
    assert gen.refused and "top" in gen.refused.lower() and panel.status.text() == gen.refused
    panel.start()  # asked again with good options: the refusal goes
    assert gen.running and gen.refused == ""
    qtbot.waitUntil(lambda: not gen.running and bool(gen.stopped), timeout=WAIT)
    assert panel.status.text().startswith("2 new tokens")


def test_what_heads_do_asks_the_state_for_the_lens_grid_and_the_scan(app, qtbot):
    """Built on the state alone, the panel's buttons reach the runner through state.effects, and
    what the runner computes comes back there and into the panel."""
    st, _worker = app
    panel = PredictPanel(st)
    qtbot.addWidget(panel)
    eff, asked = st.effects, []
    eff.sigLensGridWanted.connect(lambda: asked.append("grid"))
    eff.sigScanWanted.connect(asked.append)
    eff.sigScanStopWanted.connect(lambda: asked.append("stop"))
    panel.set_shown(True)
    # the prompt's own run: the model's first run (of the empty text) also keeps what prediction
    # reads, and a grid asked of it is cleared when the prompt's run replaces it
    qtbot.waitUntil(lambda: st.result is not None and st.result.text == PROMPT
                    and eff.run_of(st.result) is not None, timeout=WAIT)
    qtbot.mouseClick(panel.grid_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: eff.lens_grid is not None, timeout=WAIT)
    ids, lps, _labels = eff.lens_grid
    assert ids.shape == lps.shape == (st.n_layer, len(st.result.tokens))

    ab = panel.ablation_panel
    ab.source_combo.setCurrentIndex(ab.source_combo.findData("text"))
    qtbot.mouseClick(ab.scan_button, Qt.MouseButton.LeftButton)
    assert eff.scan_running
    qtbot.mouseClick(ab.cancel_button, Qt.MouseButton.LeftButton)
    assert not eff.scan_running and ab.scan_label.text() == "Scan cancelled"
    qtbot.mouseClick(ab.scan_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: eff.scan is not None and not eff.scan_running, timeout=WAIT)
    assert asked == ["grid", "text", "stop", "text"]
    assert ab.ranked.rowCount() == min(st.n_layer * st.n_head, 20)


def test_every_side_panel_is_built_on_the_state_alone(app, qtbot):
    """No panel is handed the runner or another panel's widget: each is built on the state and
    shows what the runner wrote there."""
    from attnviz.ui.panels.anatomy_panel import AnatomyPanel
    from attnviz.ui.panels.calc_panel import CalcPanel
    from attnviz.ui.panels.roles_panel import RolesPanel
    from attnviz.ui.panels.training_panel import TrainingPanel

    st, _worker = app
    panels = [cls(st) for cls in (CalcPanel, RolesPanel, AnatomyPanel, PredictPanel, GeneratePanel,
                                  TrainingPanel)]
    for panel in panels:
        qtbot.addWidget(panel)
    roles, generate_panel = panels[1], panels[4]
    roles.show()
    qtbot.waitUntil(lambda: st.head_scores is not None and not st.scores_stale, timeout=WAIT)
    qtbot.waitUntil(lambda: roles.overview.map.rowCount() == st.n_layer, timeout=WAIT)
    assert generate_panel.generate_button.isEnabled()  # a decoder: it can generate


def test_the_guide_bar_asks_the_state_for_its_head(app, qtbot):
    """Built on the state alone, the guide bar asks the state for a sample's head, the runner finds
    it and answers there (on the textbook decoder, Agreement's answer is that no head singles the
    pair out: no head to show); another text drops the question."""
    st, _worker = app
    bar = GuideBar(st)
    qtbot.addWidget(bar)
    asked, dropped = [], []
    st.sigGuideWanted.connect(lambda sample, result, _scores: asked.append((sample, result)))
    st.sigGuideDropped.connect(lambda: dropped.append(True))
    s = next(x for x in SAMPLES if x.title == "Agreement")
    st.set_text(s.text)
    qtbot.waitUntil(lambda: bar.current is not None, timeout=WAIT)
    assert asked == [(s, st.result)] and bar.current.message in bar.answer.text()
    assert bar.current.message.startswith("No head singles out") and bar.current.layer is None
    assert not bar.show_button.isEnabled()
    st.set_text("my own words")
    assert dropped and bar.current is None and not bar.show_button.isEnabled()


def highlight_pixels(gw, vb, points) -> int:
    """How many of the view points (and the pixels above and below each) are painted HIGHLIGHT."""
    img, found = gw.grab().toImage(), 0
    for x, y in points:
        p = gw.mapFromScene(vb.mapViewToScene(QPointF(x, y)))
        for dy in (-1, 0, 1):
            c = QColor(img.pixel(p.x(), p.y() + dy))
            found += (abs(c.red() - HIGHLIGHT.red()) < 40 and abs(c.green() - HIGHLIGHT.green()) < 40
                      and c.blue() < 90)
    return found


def test_the_grid_outlines_and_the_focus_view_frames_what_the_state_names(app, qtbot):
    """No Why here? panel: the state's outlined heads are outlined by the grid itself (and a head
    it does not show is named in the status line), the state's marked cell framed by the focus
    view while it shows that head."""
    st, _worker = app
    grid, fv = HeatmapGrid(st), FocusView(st)
    for view in (grid, fv):
        qtbot.addWidget(view)
        view.resize(600, 500)
        view.show()
    qtbot.waitUntil(lambda: st.result is not None and grid.layout_ is not None, timeout=WAIT)
    said = []
    st.sigStatus.connect(said.append)
    st.set_outlined([(0, 1)])
    lo = grid.layout_
    i, m = tile_index(lo, 0, 1), max(1.0, 0.06 * lo.T)
    above = [(lo.x0[i] + t * lo.T, lo.y0[i] - m) for t in np.linspace(0.1, 0.9, 9)]
    assert grid.outline.item.isVisible() and highlight_pixels(grid.gw, grid.vb, above) >= 5
    assert said[-1] == "L0 H1: outlined in the grid"
    st.set_outlined([(1, 0)])  # a head of the layer not on screen
    assert not grid.outline.item.isVisible() and highlight_pixels(grid.gw, grid.vb, above) == 0
    assert said[-1].startswith("L1 H0: not in the grid's layer 0")

    st.set_focus(0, 1)
    T = len(st.result.tokens)
    edge = [(1 + t, T - 1) for t in np.linspace(0.2, 0.8, 7)]  # the frame's top edge
    before = highlight_pixels(fv.gw, fv.vb, edge)  # (a colormap's yellow end is near HIGHLIGHT)
    st.set_marked_cell((0, 1, T - 1, 1))
    assert fv.cell_rect.isVisible() and fv.cell_rect.rect().getRect() == (1, T - 1, 1, 1)
    assert highlight_pixels(fv.gw, fv.vb, edge) >= before + 4
    st.set_focus(0, 0)  # another head: not its cell
    assert not fv.cell_rect.isVisible()
    st.set_focus(0, 1)
    assert fv.cell_rect.isVisible()
    st.set_marked_cell(None)
    assert not fv.cell_rect.isVisible() and highlight_pixels(fv.gw, fv.vb, edge) == before


def test_a_window_without_the_generate_panel_still_marks_a_generation(qtbot, tmp_path):
    """The marks belong to the sentence box (found by its object name), not to a panel."""
    w = open_window(qtbot, tmp_path / "s.ini", model=textbook.TEXTBOOK_NAME, text=PROMPT,
                    panels=())
    try:
        assert w.generate_panel is None
        box, gen = widget(w, "sentence_box"), w.state.generation
        gen.request(2)
        qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 2, timeout=WAIT)
        sels = box.extraSelections()
        assert len(sels) == 1 and sels[0].cursor.selectedText() == gen.text[len(PROMPT):]
    finally:
        w.state.generation.stop()
        w.worker.wait_idle(WAIT)


def test_the_main_window_keeps_its_childrens_widgets_to_them(window):
    """Each of these is found in the window by its object name, and the window has no attribute
    of its own for it (the controls, notices, status figures and long view own theirs)."""
    for name in ("error_banner", "text_notice", "model_notice", "layer_spin", "all_check",
                 "cmap_combo", "scale_combo", "hide_first_check", "value_check", "query_label",
                 "long_view", "load_label", "load_cancel", "tokens_label", "time_label"):
        assert widget(window, name) is not None
        assert not any(v is widget(window, name) for v in vars(window).values()), name
