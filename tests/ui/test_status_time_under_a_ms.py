"""The status bar's compute time of a run shorter than half a millisecond reads "compute <1 ms", not
"compute 0 ms" (the run took some time); longer runs keep their whole milliseconds."""

from dataclasses import replace

from windows import TOY, open_window, widget


def test_a_run_under_half_a_millisecond_reads_under_1_ms(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text="def add(a, b):")
    w.worker.wait_idle()
    label = widget(w, "time_label")
    result = replace(w.state.result, cache_used=False)  # (a run computed, not kept from before)
    for seconds, shown in ((0.00002, "compute <1 ms"), (0.00049, "compute <1 ms"),
                           (0.0006, "compute 1 ms"), (0.0123, "compute 12 ms"), (1.8414, "compute 1841 ms")):
        w.state.set_result(replace(result, compute_s=seconds))
        assert label.text() == shown, seconds
    w.worker.wait_idle()
