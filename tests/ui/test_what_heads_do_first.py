"""What heads do's first result in a fresh window: the model's first run is analysed from the moment
its result arrives, on a thread of its own (not on the pool, not after the analysis's pause); the
panel shown while that analysis is still on its way waits for it rather than start another, and
then shows the engine's numbers for the text."""

import importlib.util
import threading

import numpy as np

from attnviz.engine.analysing.effects import analyse, window_run
from attnviz.ui.machinery import effects_jobs as EJ
from attnviz.ui.machinery.worker import Worker
from windows import WAIT, open_window

TEXT = "The keys to the cabinet are on the"


def test_the_first_analysis_starts_with_the_result_on_its_own_thread_and_the_panel_waits_for_it(
        qtbot, tmp_path, smollm2, monkeypatch):
    gate = threading.Event()
    ran = []  # (thread name, whether the window's result was the analysed run's when it started)
    submitted = []  # (kind, lane) of every job
    real_analyse, real_submit = EJ.analyse_typed, Worker.submit

    def held(model, run, *a, **k):
        ran.append(threading.current_thread().name)
        assert gate.wait(WAIT / 1000)
        return real_analyse(model, run, *a, **k)

    def submit(self, kind, fn, on_done, request=None, lane="pool", job_id=None):
        submitted.append((kind, lane, kind == EJ.ANALYSIS_KIND and self.state.result is request[1].result))
        return real_submit(self, kind, fn, on_done, request, lane, job_id)
    monkeypatch.setattr(EJ, "analyse_typed", held)
    monkeypatch.setattr(Worker, "submit", submit)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
        st, eff = w.state, w.state.effects
        qtbot.waitUntil(lambda: len(ran) == 1, timeout=WAIT)
        first = [s for s in submitted if s[0] == EJ.ANALYSIS_KIND]
        assert first == [(EJ.ANALYSIS_KIND, EJ.THREAD, True)]  # submitted with the result shown
        assert ran[0].startswith(f"attnviz-{EJ.ANALYSIS_KIND}")  # its own thread, not the pool's
        assert eff.analysis is None and not eff.wanted
        w.predict_dock.show()
        w.predict_dock.raise_()
        qtbot.waitUntil(lambda: eff.wanted, timeout=WAIT)
        w.worker.effects_jobs.flush()
        assert [s for s in submitted if s[0] == EJ.ANALYSIS_KIND] == first  # waits for it
    finally:
        gate.set()
    panel = w.predict_panel
    qtbot.waitUntil(lambda: eff.analysis is not None and panel.top_table.rowCount() > 0, timeout=WAIT)
    w.worker.wait_idle()
    assert [s for s in submitted if s[0] == EJ.ANALYSIS_KIND] == first and len(ran) == 1
    model = st.model
    a, ref = eff.analysis, analyse(model, window_run(model, TEXT))
    assert eff.analysis_of(st.result) is a
    assert np.array_equal(a.clean.logprobs, ref.clean.logprobs) and np.array_equal(a.clean.top_ids, ref.clean.top_ids)
    assert np.array_equal(a.lens.target_logprobs, ref.lens.target_logprobs)
    assert np.array_equal(a.dla.heads, ref.dla.heads)
    rows = [[panel.top_table.item(r, c).text() for c in range(2)] for r in range(panel.top_table.rowCount())]
    assert rows == [[ref.label(i), f"{np.exp(lp):.3f}"] for i, lp in zip(ref.clean.top_ids, ref.clean.top_logprobs)]
    # the unembedding's copy for the kernels, made after the analysis on a thread of its own
    head = model.lm_head()
    if importlib.util.find_spec("numba") is not None:
        qtbot.waitUntil(lambda: head.pack.made, timeout=WAIT)
        w.worker.wait_idle()
        assert [s[:2] for s in submitted if s[0] == EJ.PACK_KIND] == [(EJ.PACK_KIND, EJ.THREAD)]
