"""Compare's model B as it opens beside A (ui/machinery/compare_jobs.py's session): loaded from a
BSource, checked against A, its unembedding made ready; and the memory it held handed back once it
is gone."""

from __future__ import annotations


def load_b(a, source):
    """(model B, its identity) beside A; InputError / ModelLoadError in one line."""
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


def release_after(worker, kinds: tuple, kind: str) -> None:
    """Hand the pages B's arrays held back to the system once every job of `kinds` let go as
    Compare closed has ended (each holds B until its result is delivered): glibc keeps the freed
    arenas of the pool's threads resident otherwise, B's memory staying with the process
    (tuning.release_free_memory; nothing with another C library). The trim walks every arena, so
    it runs on a thread of its own (job `kind`), a turn of the main thread after the last of those
    jobs (its frame, and B through it, gone)."""
    from PySide6.QtCore import QTimer

    from attnviz.ui.machinery import tuning
    from attnviz.ui.machinery.runner import THREAD

    if kinds:
        worker.when_none_running(kinds[0], lambda: release_after(worker, kinds[1:], kind))
        return
    QTimer.singleShot(0, worker, lambda: worker.submit(
        kind, tuning.release_free_memory, lambda *_: None, None, THREAD))
