"""Run while a patching run is under way tells the Patching tab once (one sigChanged, one refresh):
the run it stops is not shown as 'Cancelled' in between, whether the new run starts or is refused
(the real window, offscreen, on the toy decoder)."""

import threading

from attnviz.engine.analysing import patching as PT
from windows import WAIT

CORRUPT = "When John and Mary went to the store, John gave a drink to"  # as long as the toy's IOI text


def test_run_over_a_run_under_way_tells_the_view_once(qtbot, patching_window, monkeypatch):
    w = patching_window
    p, jobs = w.patching_panel, w.patch_jobs
    gate = threading.Event()
    run_batch = PT.run_batch

    def held(*args, **kw):  # the patched runs wait at their first batch until the test lets them go
        gate.wait(3 * WAIT / 1000)
        return run_batch(*args, **kw)

    monkeypatch.setattr(PT, "run_batch", held)
    told = []
    try:
        p.corrupt_box.setText(CORRUPT)
        p.what_box.setCurrentText("head_out")
        assert p.run()
        qtbot.waitUntil(lambda: jobs.sides is not None, timeout=WAIT)
        jobs.sigChanged.connect(lambda: told.append(jobs.note))
        assert p.run() and jobs.running
        assert told == [""]  # the new run's start, once
        told.clear()
        p.corrupt_box.setText(CORRUPT + " her")  # a token longer: refused
        assert not p.run() and not jobs.running
        assert len(told) == 1 and told[0].startswith("the clean text is ")
    finally:
        gate.set()
    w.worker.wait_idle()
