"""The layer on screen before the run ends: on a causal model (a keystroke's run streams every
weight) the runner hands the grid the run's first layers as soon as the layer on screen is
computed, and the layers after it follow. What the grid paints from them is what it paints from
the result; while it shows them there is no hover read-out (the read-outs read the result); and
where the other layers could change the picture (value weighting, the shared scale with the first
key hidden, all layers shown) no preview is made."""

import numpy as np
import pytest
from PySide6.QtCore import Qt

from test_ui_window import view_to_widget
from windows import WAIT, drain_events, hover_plot, open_window, wait_for_text, widget
from attnviz.engine.computing.request import RunRequest
from attnviz.ui.machinery import preview_timing

TEXT = "The keys to the cabinet are on the"


@pytest.fixture(autouse=True)
def every_run_worth_a_preview(monkeypatch):
    """The runs here hand their first layers over whatever they take (on this machine SmolLM2's
    keystroke may be too quick for one: test_preview_when.py checks when they are asked for)."""
    monkeypatch.setattr(preview_timing, "PREVIEW_SAVES_S", 0.0)


@pytest.fixture
def smollm2_window(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    yield w
    w.worker.wait_idle()


def painted(w):
    return np.array(w.grid.img.image, copy=True)


def test_a_keystroke_paints_the_layer_on_screen_before_the_result_and_the_result_the_same(
        smollm2_window, qtbot):
    w = smollm2_window
    st = w.state
    st.set_layer(4)
    w.worker.wait_idle()
    seen = []  # (preview, what the grid painted from it, whether the grid drew it)
    st.sigPreviewChanged.connect(
        lambda p: p is not None and seen.append((p, painted(w), w.grid.drawn is p)))
    for text in (TEXT + " t", TEXT + " ta", TEXT + " table"):
        w.set_text(text)
        wait_for_text(qtbot, w, text)
        w.worker.wait_idle()
        drain_events()
        p, image, drawn = seen[-1]
        r = st.result
        assert p.text == text and drawn  # the grid painted this text's preview first
        assert p.attentions.shape == (5,) + r.attentions.shape[1:]  # layers 0..4: the one on screen
        np.testing.assert_array_equal(p.attentions, r.attentions[:5])
        assert w.grid.drawn is r
        np.testing.assert_array_equal(image, painted(w))  # the result paints the same picture
        assert p.cache_reused == r.cache_reused > 0  # a keystroke's cached step, both
    assert st.preview is None  # the result took its place


def test_there_is_no_read_out_nor_the_last_texts_badge_over_a_preview(smollm2_window, qtbot):
    w, g = smollm2_window, smollm2_window.grid
    st = w.state
    qtbot.waitUntil(lambda: st.head_labels is not None and any(map(any, st.head_labels)), timeout=WAIT)
    badged = g.titles()
    assert any(len(t.split("  ")) > 1 for t in badged)  # "L0 H5  self": the typed text's badges
    text = TEXT + " table"
    partial = st.model.run(text, request=RunRequest(layers=1, use_cache=False))  # layer 0 of the next text
    st.set_preview(partial)
    assert g.drawn is partial
    assert g.titles() == [f"L0 H{h}" for h in range(9)]
    x, y = g.cell_center(0, 3, 6, 2)
    with qtbot.waitSignal(g.plot.scene().sigMouseMoved, timeout=WAIT):  # the grid saw the move
        qtbot.mouseMove(g.gw.viewport(), view_to_widget(g.vb, g.gw, x, y))
    assert g.hover_text == ""
    w.set_text(text)
    wait_for_text(qtbot, w, text)
    assert g.drawn is st.result
    x, y = g.cell_center(0, 3, 6, 3)  # the next cell: a move the grid sees
    qtbot.mouseMove(g.gw.viewport(), view_to_widget(g.vb, g.gw, x, y))
    want = f"L0 H3  ·on → ·the  {st.result.attentions[0, 3, 6, 3]:.2f}"
    qtbot.waitUntil(lambda: g.hover_text.startswith(want), timeout=WAIT)


def test_no_preview_where_the_other_layers_could_change_the_picture(smollm2_window, qtbot):
    """Each case in turn on one window (opening SmolLM2 costs seconds): value weighting, the shared
    scale with the first key hidden, all layers shown, the last layer on screen."""
    w = smollm2_window
    st = w.state
    seen = []
    st.sigPreviewChanged.connect(lambda p: p is not None and seen.append(p))
    cases = {
        "value weighted": (lambda: st.set_value_weighted(True), lambda: st.set_value_weighted(False)),
        "hidden first key, shared scale": (
            lambda: (st.set_scale_mode("shared"), st.set_hide_first(True)),
            lambda: st.set_hide_first(False)),
        "all layers": (lambda: st.set_view_mode("all"), lambda: st.set_view_mode("layer")),
        "last layer": (lambda: st.set_layer(st.n_layer - 1), lambda: st.set_layer(2)),
    }
    for i, (change, (on, off)) in enumerate(cases.items()):
        st.set_layer(2)
        assert st.preview_depth() == 3, change
        on()
        assert st.preview_depth() is None, change
        w.worker.wait_idle()
        text = TEXT + " table" * (i + 1)
        w.set_text(text)
        wait_for_text(qtbot, w, text)
        w.worker.wait_idle()
        assert seen == [], change
        st.set_preview(st.model.run(text,
                                    request=RunRequest(layers=st.n_layer - 1, use_cache=False)))
        assert w.grid.drawn is st.result, change  # a preview given all the same is not painted
        st.set_preview(None)
        seen.clear()
        off()


def test_per_head_scale_keeps_the_preview_with_the_first_key_hidden(smollm2_window, qtbot):
    w = smollm2_window
    st = w.state
    st.set_scale_mode("per-head")
    st.set_hide_first(True)
    st.set_layer(1)
    assert st.preview_depth() == 2
    w.worker.wait_idle()
    seen = []
    st.sigPreviewChanged.connect(lambda p: p is not None and seen.append((p, painted(w))))
    w.set_text(TEXT + " table")
    wait_for_text(qtbot, w, TEXT + " table")
    w.worker.wait_idle()
    drain_events()
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0][1], painted(w))


def test_an_encoder_makes_no_preview(window):
    st = window.state
    assert not st.model.config.causal and st.preview_depth() is None


def test_the_token_strip_status_and_focused_head_show_the_previews_text(smollm2_window, qtbot):
    """While the grid shows a preview of a pasted text, nothing beside it shows the last text:
    the token strip holds the preview's tokens (a click waits for the result: a query is a position
    in the whole run), the status bar counts them and says the rest is being computed, and the
    focused head (in the layer on screen) is the preview's, without the last text's badge."""
    w = smollm2_window
    st, strip, focus = w.state, w.token_strip, w.focus_view
    st.set_focus(0, 3)
    qtbot.waitUntil(lambda: st.head_labels is not None and st.badge(0, 3) is not None, timeout=WAIT)
    st.set_query(2)  # "·to": the same token after the same tokens in the pasted text
    qtbot.waitUntil(lambda: focus.title.text().count(st.badge(0, 3)) == 1, timeout=WAIT)
    before = list(strip.labels)
    hover_plot(qtbot, focus.vb, focus.gw, 1.5, 2.5)
    assert focus.hover_text.startswith("L0 H3")  # the last text's read-out, before the preview
    text = TEXT + " kitchen table, next to the old radio that still works."
    partial = st.model.run(text, request=RunRequest(layers=1, use_cache=False))  # layer 0 of the pasted text
    st.set_preview(partial)
    T = len(partial.tokens)
    assert len(partial.tokens) > len(before) + 5
    assert strip.labels == partial.labels and strip.query == 2
    assert widget(w, "tokens_label").text() == f"{T} tokens"
    assert widget(w, "time_label").text() == "computing layers 1\u201329\u2026"
    assert f" · {T} tokens · " in focus.title.text() and st.badge(0, 3) not in focus.title.text()
    np.testing.assert_array_equal(focus.img.image, partial.attentions[0, 3])
    hover_plot(qtbot, focus.vb, focus.gw, 1.5, T - 0.5)  # the preview's last row
    assert focus.hover_text == ""  # no read-out: the read-outs read the result
    # a click on the strip's last token while the rest is computed picks nothing
    qtbot.mouseClick(strip, Qt.MouseButton.LeftButton, pos=strip.token_rect(T - 1).center())
    assert st.query_pos == 2
    # the result follows: every view shows it, and the strip takes clicks again
    w.set_text(text)
    wait_for_text(qtbot, w, text)
    r = st.result
    assert strip.labels is r.labels and widget(w, "tokens_label").text() == f"{T} tokens"
    assert widget(w, "time_label").text() == f"compute {r.compute_s * 1000:.0f} ms"
    np.testing.assert_array_equal(focus.img.image, r.attentions[0, 3])
    hover_plot(qtbot, focus.vb, focus.gw, 1.5, T - 0.5)
    assert focus.hover_text == w.grid.readout_at(0, 3, T - 1, 1)
    qtbot.mouseClick(strip, Qt.MouseButton.LeftButton, pos=strip.token_rect(T - 1).center())
    assert st.query_pos == T - 1


def test_the_status_bar_names_the_one_layer_left(smollm2_window, qtbot):
    w = smollm2_window
    st = w.state
    st.set_layer(28)  # SmolLM2's last layer is 29: one layer comes after the preview
    w.worker.wait_idle()
    partial = st.model.run(TEXT + " table", request=RunRequest(layers=29, use_cache=False))
    st.set_preview(partial)
    assert w.grid.drawn is partial
    assert widget(w, "time_label").text() == "computing layer 29\u2026"


def test_the_focused_head_is_not_drawn_again_when_its_preview_is_followed_by_the_result(
        smollm2_window, qtbot, monkeypatch):
    """A keystroke's result after its preview is the same picture in the layer on screen: the focus
    view keeps its image and changes only its title (one image a keystroke, not two)."""
    w = smollm2_window
    st, focus = w.state, w.focus_view
    st.set_focus(0, 3)
    w.worker.wait_idle()
    text = TEXT + " table"
    partial = st.model.run(text, request=RunRequest(layers=1, use_cache=False))
    st.set_preview(partial)
    assert f" · {len(partial.tokens)} tokens · " in focus.title.text()
    drawn = []
    real = focus.img.setImage
    monkeypatch.setattr(focus.img, "setImage", lambda *a, **kw: (drawn.append(a), real(*a, **kw)))
    result = st.model.run(text, request=RunRequest(use_cache=False))
    st.set_result(result)
    assert drawn == [] and focus.title.text().startswith("<b>L0 H3</b>")
    np.testing.assert_array_equal(focus.img.image, result.attentions[0, 3])
    st.set_focus(0, 4)  # another head: drawn
    assert sum(1 for a in drawn if a) == 1
    np.testing.assert_array_equal(focus.img.image, result.attentions[0, 4])


def test_with_what_heads_do_shown_a_keystroke_paints_the_layer_on_screen_first_too(qtbot, tmp_path, smollm2):
    """A run that keeps what prediction reads (What heads do shown, no head switched off) hands the
    grid its first layers as a plain run does: the grid shows the clean run's patterns."""
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
    st = w.state
    w.predict_dock.show()
    w.predict_dock.raise_()
    qtbot.waitUntil(lambda: st.effects.wanted, timeout=WAIT)
    st.set_layer(4)
    w.worker.wait_idle()
    seen = []
    st.sigPreviewChanged.connect(lambda p: p is not None and seen.append(p))
    w.set_text(TEXT + " t")
    wait_for_text(qtbot, w, TEXT + " t")
    w.worker.wait_idle()
    drain_events()
    r = st.result
    assert st.effects.run_of(r) is not None and r.trace is not None  # the run kept the trace
    assert seen and seen[-1].text == TEXT + " t"
    np.testing.assert_array_equal(seen[-1].attentions, r.attentions[:5])
    assert st.preview is None


def test_the_status_bars_query_follows_the_preview(smollm2_window, qtbot):
    """Over a preview the status bar names the query the grid shows: the same token where the text
    before it is the same, none where the text was edited before it (not the last result's)."""
    w = smollm2_window
    st, label = w.state, widget(w, "query_label")
    st.set_query(2)  # "·to"
    shown = f"Query: {st.result.labels[2]} (#2)"
    assert label.text() == shown
    kept = st.model.run(TEXT + " table", request=RunRequest(layers=1, use_cache=False))
    st.set_preview(kept)  # the same tokens up to the query: it stays
    assert st.preview_query() == 2 and label.text() == shown
    edited = st.model.run("A key " + TEXT, request=RunRequest(layers=1, use_cache=False))
    st.set_preview(edited)  # edited before the query: the grid shows none, and so does the status bar
    assert w.grid.drawn is edited and st.preview_query() is None
    assert label.text() == ""
    st.set_layer(5)  # beyond the preview's one layer: the grid shows the result, its query too
    assert w.grid.drawn is st.result and label.text() == shown
    st.set_layer(0)
    assert w.grid.drawn is edited and label.text() == ""
