"""The heatmap grid uses the window: the share of the grid's area that heads cover at two common
screen sizes (an encoder without grouped-query attention, a decoder with it), a layout that stays
put while the text changes, and a window whose width a picked query token never changes."""

import pytest

from attnviz.engine.analysing.samples import SAMPLES
from windows import WAIT, drain_events, open_window, wait_for_text, widget


def covered(grid) -> float:
    """The share of the grid widget's area that shows heads (their squares on screen)."""
    lo = grid.layout_
    view = grid.vb.viewRect()
    scale = min(grid.vb.width() / view.width(), grid.vb.height() / view.height())  # screen px per tile px
    side = lo.T * scale
    return len(lo.heads) * side * side / (grid.width() * grid.height())


@pytest.fixture
def big_window(qtbot, settings_path):
    return open_window(qtbot, settings_path, text="The keys to the cabinet are on the table.")


def show(w, qtbot, mode):
    w.state.set_view_mode(mode)
    drain_events()
    w.grid.refresh()
    return covered(w.grid)


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 800)])
def test_heads_cover_the_grid(big_window, qtbot, smollm2, size):
    w = big_window
    w.resize(*size)
    drain_events()
    # MiniLM: 12 heads (the first row keeps room for its titles above the focus frame: a short text
    # gives each token many pixels, and a title cut by the grid's top was the price of 0.55 here
    # and of 0.33 for SmolLM2 below)
    assert show(w, qtbot, "layer") >= 0.52
    assert show(w, qtbot, "all") >= 0.4  # 6 layers x 12 heads
    w.state.set_view_mode("layer")
    w.state.set_model(smollm2)
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.attentions.shape[1] == 9,
                    timeout=WAIT)
    assert show(w, qtbot, "layer") >= 0.31  # SmolLM2: 9 heads in 3 KV groups, a group never wraps
    assert show(w, qtbot, "all") >= 0.45  # 30 layers x 9 heads, in bands of layers side by side


def test_the_layout_stays_while_the_text_changes_and_a_query_never_widens_the_window(
        big_window, qtbot, smollm2):
    w = big_window
    w.resize(1920, 1080)
    w.state.set_model(smollm2)
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.attentions.shape[1] == 9,
                    timeout=WAIT)
    seen = set()
    for sample in SAMPLES[:4]:  # the guide bar shows each sample's hint, then its answer
        w.set_text(sample.text)
        wait_for_text(qtbot, w, sample.text)
        w.worker.flush_scores()
        w.worker.wait_idle(WAIT)
        drain_events()
        seen.add((w.grid.layout_.ncols, w.guide_bar.height()))
        width = w.width()
        for q in (0, len(w.state.result.tokens) - 1):
            w.state.toggle_query(q)
            drain_events()  # a wider label would have resized the window by now
            assert w.width() == width and widget(w, "query_label").text().startswith("Query: ")
    assert len({ncols for ncols, _ in seen}) == 1, seen
    w.state.set_query(None)
    w.resize(w.minimumSizeHint().width(), 900)  # as narrow as it goes: any wider label would widen it
    drain_events()
    width, least = w.width(), w.minimumSizeHint().width()
    for q in range(len(w.state.result.tokens)):
        w.state.toggle_query(q)
        drain_events()
        assert (w.width(), w.minimumSizeHint().width()) == (width, least)
