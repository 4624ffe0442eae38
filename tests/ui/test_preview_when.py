"""When a keystroke's run hands the grid its first layers early: only where the layers after the
one on screen are expected to take long enough (preview_timing.py). A fast model's keystroke
(about a frame) shows its result with no preview: the split run and the preview's paint would make
the result later; a slow one paints the layer on screen first, then the result, the same picture.
The recorded run times are chosen (PreviewTiming.note) so that the rule is checked on any machine."""

import gc
import weakref
from types import SimpleNamespace

import numpy as np

from windows import drain_events, open_window, wait_for_text
from attnviz.ui.machinery.preview_timing import PREVIEW_SAVES_S, RECENT_RUNS, PreviewTiming

TEXT = "The keys to the cabinet are on the"


class Model(SimpleNamespace):  # (weak references to it can be made, as to an engine Model)
    pass


def a_model(n_layer: int = 30):
    return Model(config=SimpleNamespace(n_layer=n_layer))


def test_the_preview_is_kept_until_a_run_of_the_model_is_timed_then_the_recent_runs_decide():
    timing, m = PreviewTiming(), a_model()
    assert timing.depth(m, 1) == 1  # no run timed yet: its first run after a load keeps it
    timing.note(m, 0.008)  # a keystroke in half a frame
    assert timing.depth(m, 1) is None
    assert timing.depth(m, None) is None  # the picture allows none: none
    timing.note(m, 0.5)  # one odd run (the whole text, no cache) and a fast one: the fast decides
    assert timing.depth(m, 1) is None
    timing.note(m, 0.5)
    assert timing.depth(m, 1) == 1  # most recent runs slow (a long text): the preview is back
    assert timing.depth(a_model(), 1) == 1  # another model's times say nothing of this one


def test_the_timings_do_not_keep_a_model_let_go():
    timing, m = PreviewTiming(), a_model()
    timing.note(m, 0.008)
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None


def test_the_preview_is_asked_for_where_the_layers_after_it_take_long_enough():
    timing, m = PreviewTiming(), a_model(30)
    timing.note(m, PREVIEW_SAVES_S * 2)
    assert timing.depth(m, 1) == 1  # 29 of 30 layers after it
    assert timing.depth(m, 10) == 10  # two thirds of them
    assert timing.depth(m, 20) is None  # a third: the preview would paint little sooner


def keystroke(qtbot, w, seconds: float, text: str):
    """Type `text` in `w` with its model's recent runs taken to last `seconds` -> the previews the
    state was given (each with whether the grid drew it then, and what it painted)."""
    st = w.state
    for _ in range(RECENT_RUNS):
        w.worker.preview_timing.note(st.model, seconds)
    seen = []
    st.sigPreviewChanged.connect(lambda p: p is not None and seen.append(
        (p, w.grid.drawn is p, np.array(w.grid.img.image, copy=True))))
    w.set_text(text)
    wait_for_text(qtbot, w, text)
    w.worker.wait_idle()
    drain_events()
    return seen


def test_a_fast_models_keystroke_shows_its_result_with_no_preview_and_a_slow_ones_the_preview_first(
        qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    st = w.state
    st.set_layer(0)
    w.worker.wait_idle()
    assert st.preview_depth() == 1  # the picture allows a preview: the time decides
    assert keystroke(qtbot, w, 0.005, TEXT + " t") == []  # a keystroke in a third of a frame
    assert w.grid.drawn is st.result and st.result.text == TEXT + " t"
    seen = keystroke(qtbot, w, 0.25, TEXT + " ta")  # a quarter second (a 1B model on 2 cores)
    (p, drawn, image), = seen
    r = st.result
    assert p.text == TEXT + " ta" and drawn  # the grid painted the preview first
    np.testing.assert_array_equal(p.attentions, r.attentions[:1])
    assert w.grid.drawn is r and st.preview is None  # then the result, the same picture
    np.testing.assert_array_equal(image, np.array(w.grid.img.image, copy=True))
    w.worker.wait_idle()
