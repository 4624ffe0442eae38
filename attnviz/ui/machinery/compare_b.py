"""Compare's model B as it opens beside A (ui/machinery/compare_jobs.py's session): loaded from a
BSource, checked against A, its unembedding made ready; and the memory it held handed back once it
is gone."""

from __future__ import annotations

import threading
import weakref

import shiboken6
from PySide6.QtCore import QObject, Qt, Signal


def load_b(a, source, release: MemoryRelease):
    """(model B, its identity) beside A; InputError / ModelLoadError in one line. `release` hands
    B's memory back once B is freed: closed, replaced, refused, or its load let go."""
    from attnviz.engine import load_model
    from attnviz.engine.analysing import compare as C
    from attnviz.engine.analysing.pair import (
        check_same_shape,
        check_same_vocab,
        load_second,
    )
    from attnviz.engine.computing.checkpoints import checkpoint_record, model_at

    what = source.describe(a.name)
    if source.kind == "quantized":
        def load(_budget):
            from attnviz.engine.computing.quantized import quantized_model

            return quantized_model(a, str(source.value))
        b = load_second(load, a, what)
        ident = C.identity(a, what, quantized=str(source.value), checkpoint=checkpoint_record(a))
    else:
        if source.kind == "checkpoint":
            from attnviz.engine.computing.checkpoints import load_checkpoints

            ckpts = load_checkpoints(a)
            if ckpts is None:
                from attnviz.engine.errors import InputError

                raise InputError(f"{a.name} has no training checkpoints to compare with")
            b = load_second(lambda _budget: ckpts.model(int(source.value)), a, what)
        else:
            b = load_second(lambda budget: model_at(load_model(str(source.value), budget=budget), None),
                            a, "model B")
        ident = C.identity(b, b.name, checkpoint=checkpoint_record(b))
    release.watch(b)
    check_same_shape(a, b)
    check_same_vocab(a, b)
    ready_heads(a, b)
    from attnviz.ui.machinery.tuning import release_free_memory

    release_free_memory()  # (quantizing in memory frees its blocks on this thread and the pool's)
    return b, ident


def ready_heads(a, b) -> None:
    """Build, as B opens, the unembeddings a keystroke's next-token numbers read: both sides'
    tables (compare_tokens.pair_heads: each checked finite in one pass over it) and A's packed for the
    kernels where B reads the same table (compare_tokens.kernel_logits). Built by the first keystroke's
    job instead, they would hold the pool for a pass that no keystroke stops, and the next
    keystrokes' runs behind it. Nothing for a model that predicts no next token."""
    from attnviz.engine.analysing import compare_tokens as NT
    from attnviz.engine.errors import NoPrediction

    if not (NT.predicts(a) and NT.predicts(b)):
        return
    ha, hb = NT.pair_heads(a, b)
    if a.weights.packed_types and hb.w_u is ha.w_u:
        try:
            _ = a.lm_head().packed  # (a head packs its table the first time this is asked)
        except NoPrediction:  # (the next-token job says so in its own line)
            pass


class MemoryRelease(QObject):
    """Hands the pages a freed B held back to the system (tuning.release_free_memory: glibc keeps
    the freed arenas of the pool's threads resident otherwise, B's memory staying with the process;
    nothing with another C library). One for the app, on the main thread for good: B's finalizer
    holds it, never a window, its runner or a model, so a B freed after its window closed (a job let
    go held it) is handed back too and keeps nothing alive."""

    freed = Signal()  # a B was freed, on whichever thread dropped it last

    def __init__(self):
        super().__init__()
        # queued even from the main thread: the finalizer runs before B's arrays are freed
        self.freed.connect(self._release, Qt.ConnectionType.QueuedConnection)

    def watch(self, b) -> None:
        """Hand B's memory back once B is freed (from any thread)."""
        weakref.finalize(b, _freed, self).atexit = False

    def _release(self) -> None:
        # the trim walks every arena: a thread of its own, not the window's runner (it may be gone)
        threading.Thread(target=_trim, name="attnviz-release-memory", daemon=True).start()


def _freed(release: MemoryRelease) -> None:
    if shiboken6.isValid(release):  # (else Python is closing down)
        release.freed.emit()


def _trim() -> None:
    from attnviz.ui.machinery import tuning

    tuning.release_free_memory()


_RELEASE: MemoryRelease | None = None


def memory_release() -> MemoryRelease:
    """The app's MemoryRelease, made on the main thread the first time it is asked."""
    global _RELEASE
    if _RELEASE is None:
        assert threading.current_thread() is threading.main_thread(), "made on the main thread"
        _RELEASE = MemoryRelease()
    return _RELEASE
