"""Compare opened, typed into and left again holds no more than before: leaving it frees B's packed
layers too, not only B (the one-row steps kept a plan, and with it the layer, of every packed layer
they ran: onerow_block._plan; a GGUF layer store referred to itself through its build, so one
frozen with start-up's objects stayed until the window closed)."""

from __future__ import annotations

import gc
import weakref

import pytest
from PySide6.QtTest import QTest

from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.machinery.tuning import freeze_start_up_objects, thaw_objects
from attnviz.ui.panels.compare_menu import open_compare
from windows import WAIT, open_window

TEXT = "Dr Zorblax met"


@pytest.mark.parametrize("frozen", ["before B", "with B"])
def test_leaving_compare_frees_the_quantized_twins_packed_layers(qtbot, tmp_path, smollm2, frozen):
    """Compare opened once start-up's objects are frozen out of the collector's way, as a user
    opens it, or B frozen with them (Compare opened during start-up): B goes by reference counting
    alone, which a frozen object's reference cycle would escape until the window closes."""
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    jobs = w.worker.compare_jobs
    qtbot.waitUntil(lambda: gc.get_freeze_count() > 0, timeout=WAIT)
    try:
        open_compare(w, BSource("quantized", "Q8_0"))
        if frozen == "with B":
            qtbot.waitUntil(lambda: jobs.b is not None, timeout=4 * WAIT)
            freeze_start_up_objects()

        def compared(text):
            c = jobs.comparison
            return c is not None and c.result.text == text and jobs.induction is not None
        qtbot.waitUntil(lambda: compared(TEXT), timeout=4 * WAIT)
        w.text_box.setFocus()
        w.text_box.moveCursor(w.text_box.textCursor().MoveOperation.End)
        for ch in " Mrs":  # each key one more token for B's run on its own cache: the one-row steps
            QTest.keyClick(w.text_box, ch)
            text = w.text_box.toPlainText()
            qtbot.waitUntil(lambda text=text: compared(text), timeout=4 * WAIT)
        b = jobs.b
        store = b.weights.layers
        layers = [weakref.ref(store.packed_view(i).packed) for i in range(b.config.n_layer)]
        assert all(ref() is not None for ref in layers)  # (B holds its layers packed)
        gone = weakref.ref(b)
        del b, store
        jobs.close()
        w.worker.wait_idle()
        # freed once the last job's delivery (queued to the main thread) has been dropped
        qtbot.waitUntil(lambda: gc.collect() is not None and gone() is None
                        and all(ref() is None for ref in layers), timeout=WAIT)
    finally:
        jobs.close()
        w.worker.wait_idle()
        thaw_objects()  # (as the window's close does)
