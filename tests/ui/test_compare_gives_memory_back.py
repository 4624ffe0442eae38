"""Leaving Compare hands the memory B held back to the system (glibc keeps the freed arenas of
the pool's threads resident otherwise, B's memory staying with the process): the process's
resident memory comes back to where it was before Compare opened, once B itself is gone, its jobs
let go as Compare closed included (compare_b.release_when_freed)."""

from __future__ import annotations

import gc
import weakref

import pytest
from PySide6.QtTest import QTest

from attnviz.ui.machinery import tuning
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import TOY, WAIT, open_window

TEXT = "When Mary and John went to the store"
MiB = 2**20
# SmolLM2 against its Q8_0 twin: B and its runs take about 100 MiB, nearly all of it kept
# resident after leaving Compare where the free pages are not released
GROWN = 50 * MiB  # B's memory is there to give back
# what leaving Compare may keep: A's caches for the text typed, the heap's pages still partly used
KEPT = 70 * MiB


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def spy_on_releases(monkeypatch, b) -> list[bool]:
    """Per release of free pages from here on, once it has returned: whether `b` (a weak reference
    to B or to what B holds) was gone by then."""
    released = []
    real = tuning.release_free_memory

    def release():
        gone = b() is None
        real()
        released.append(gone)
    monkeypatch.setattr(tuning, "release_free_memory", release)
    return released


def compared(jobs, text) -> bool:
    """Whether the comparison of `text` is in, its induction heads and next-token numbers too."""
    c = jobs.comparison
    return (c is not None and c.result.text == text and jobs.induction is not None
            and c.doc is not None and c.doc.get("kld") is not None)


def leave_compare(qtbot, monkeypatch, jobs) -> None:
    """Close Compare and wait for B's memory to be handed back."""
    released = spy_on_releases(monkeypatch, weakref.ref(jobs.b))
    jobs.close()
    qtbot.waitUntil(lambda: gc.collect() is not None and True in released, timeout=WAIT)


@pytest.mark.parametrize("when", ["idle", "typing"])
def test_leaving_compare_gives_b_s_memory_back(qtbot, tmp_path, smollm2, monkeypatch, when):
    """Measured on Compare opened a second time: the first pays once for what the process keeps
    from then on (the panel, built once, and the code it loads). `typing`: Compare closed right after a
    keystroke, its runs and comparison still on their way (a job let go holds B until it ends)."""
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text="Dr Zorblax met")
    jobs = w.worker.compare_jobs
    qtbot.waitUntil(lambda: gc.get_freeze_count() > 0, timeout=WAIT)  # start-up over, as a user opens it
    open_compare(w, BSource("quantized", "Q8_0"))
    qtbot.waitUntil(lambda: compared(jobs, w.state.text), timeout=4 * WAIT)
    leave_compare(qtbot, monkeypatch, jobs)
    w.worker.wait_idle()
    gc.collect()
    tuning.release_free_memory()  # (what was left free before is not this Compare's)
    before = rss_bytes()
    open_compare(w, BSource("quantized", "Q8_0"))
    qtbot.waitUntil(lambda: compared(jobs, w.state.text), timeout=4 * WAIT)
    w.text_box.setFocus()
    w.text_box.moveCursor(w.text_box.textCursor().MoveOperation.End)
    for ch in " Mrs":
        QTest.keyClick(w.text_box, ch)
        if when == "idle":
            qtbot.waitUntil(lambda: compared(jobs, w.text_box.toPlainText()), timeout=4 * WAIT)
    grown = rss_bytes() - before
    leave_compare(qtbot, monkeypatch, jobs)
    kept = rss_bytes() - before
    print(f"resident memory: {grown / MiB:+.0f} MiB with Compare open, {kept / MiB:+.0f} MiB after")
    assert grown > GROWN
    assert kept < KEPT
    w.worker.wait_idle()


@pytest.mark.parametrize("when", ["idle", "typing"])
def test_the_free_pages_are_released_once_b_is_gone(qtbot, tmp_path, monkeypatch, when):
    """On the toy decoder: B is gone before its memory is handed back (the release runs after it
    is freed, whichever thread freed it). B's weights are watched, not B: a weak reference to B
    reads None in B's own finalizer already, before its arrays are freed."""
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=TEXT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("model", TOY))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.induction is not None, timeout=WAIT)
    w.worker.wait_idle()
    b = weakref.ref(jobs.b.weights)
    released = spy_on_releases(monkeypatch, b)
    if when == "typing":
        w.set_text(TEXT + " and")
        qtbot.waitUntil(lambda: w.worker.running("compute") is not None or w.state.result.text != TEXT,
                        timeout=WAIT)
    jobs.close()
    qtbot.waitUntil(lambda: gc.collect() is not None and bool(released), timeout=WAIT)
    assert released[0] and b() is None
    w.worker.wait_idle()


@pytest.mark.parametrize("libc", ["without malloc_trim", "not found"])
def test_a_c_library_without_malloc_trim_releases_nothing(libc):
    """Another C library than glibc (musl has no malloc_trim), or none found by name: the release
    does nothing, and says nothing (a fresh process: the trim is looked up once)."""
    import subprocess
    import sys

    fake = "lambda *a, **k: object()" if libc == "without malloc_trim" else "no_library"
    code = ("import ctypes\n"
            "from attnviz.ui.machinery import tuning\n"
            "def no_library(*a, **k):\n"
            "    raise OSError('no such library')\n"
            f"ctypes.CDLL = {fake}\n"
            "tuning.release_free_memory()\n"
            "tuning.release_free_memory()\n"
            "print('released nothing')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout, out.stderr) == (0, "released nothing\n", "")
