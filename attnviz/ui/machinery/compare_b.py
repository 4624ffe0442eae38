"""Compare's model B as it opens beside A (ui/machinery/compare_jobs.py's session): loaded from a
BSource, checked against A, its unembedding made ready; and the memory it held handed back once it
is gone."""

from __future__ import annotations

import threading
import weakref


def load_b(a, source, relay, checkpoints=None):
    """(B as pair_memory.load_beside gave it, its identity) beside A, A not changed (Second.accept lowers
    its budget once the window keeps B, so a B refused or let go leaves A as it was);
    InputError / ModelLoadError in one line. B's memory is
    handed back once B is freed (closed, replaced, refused, or its load let go), through `relay`:
    the app's (job.shared_relay), asked for on the main thread. `checkpoints`: the CheckpointSet
    A is a step of (the window's, which the Compare menu lists), else A's folder's own; a
    checkpoint B is that set's step, loaded as a model of its own (a step folder A was loaded from
    lists no checkpoints: its set is the one it came from)."""
    from attnviz.engine import load_model
    from attnviz.engine.analysing import compare as C
    from attnviz.engine.analysing.pair import check_same_shape, check_same_vocab
    from attnviz.engine.analysing.pair_memory import load_beside
    from attnviz.engine.computing.checkpoints import checkpoint_record, checkpoint_words, model_at

    what = ""  # (Compare's note names B: "Could not compare with …", and load_beside says why)
    if source.kind == "quantized":
        def load(_budget):
            from attnviz.engine.computing.quantized import quantized_model

            return quantized_model(a, str(source.value))
        second = load_beside(load, a, what)
        ident = C.identity(a, f"{a.name}{checkpoint_words(a)} quantized to {source.value}",
                           quantized=str(source.value), checkpoint=checkpoint_record(a))
    else:
        if source.kind == "checkpoint":
            from attnviz.engine.computing.checkpoints import CheckpointSet, load_checkpoints

            ckpts = load_checkpoints(a) if checkpoints is None else checkpoints
            if ckpts is not None:  # (B's steps its own Models, freed with B; the last is A's folder's)
                ckpts = CheckpointSet(ckpts.base, ckpts.meta, ckpts.infos)
            if ckpts is None:
                from attnviz.engine.errors import InputError

                raise InputError(f"{a.name} has no training checkpoints to compare with")
            # (the last step is the folder's own model, which the window holds: as it is)
            second = load_beside(lambda _budget: ckpts.model(int(source.value)), a, what,
                                 shared=(ckpts.base,))
        else:
            second = load_beside(lambda budget: model_at(load_model(str(source.value), budget=budget), None),
                                 a, what)
        b = second.model
        ident = C.identity(b, b.name + checkpoint_words(b), checkpoint=checkpoint_record(b))
    b = second.model
    if second.own:  # (A, or the window's folder model, is never freed with B)
        release_when_freed(b, relay)
    check_same_shape(a, b)
    check_same_vocab(a, b)
    ready_heads(a, b)
    from attnviz.ui.machinery.tuning import release_free_memory

    release_free_memory()  # (quantizing in memory frees its blocks on this thread and the pool's)
    return second, ident


def give_back(a, b) -> None:
    """A's budget, lowered beside a B Compare loaded for itself, the chosen one whole again as
    Compare lets B go (pair_memory.own_budget)."""
    from attnviz.engine.analysing.pair_memory import own_budget
    from attnviz.engine.reading.memory_budget import chosen_budget

    own_budget(a, b, chosen_budget())


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


def release_when_freed(b, relay) -> None:
    """Hand the pages B held back to the system once B is freed, on whichever thread drops it last
    (tuning.release_free_memory: glibc keeps the freed arenas of the pool's threads resident
    otherwise, B's memory staying with the process; nothing with another C library). B's finalizer
    holds the app's relay, which lives on the main thread for good, never a window, its runner or a
    model: a B freed after its window closed (a job let go held it) is handed back too and keeps
    nothing alive. The relay runs the release queued, after B's arrays are freed."""
    weakref.finalize(b, relay.call_soon, _release).atexit = False


def _release() -> None:
    # the trim walks every arena: a thread of its own, not the window's runner (it may be gone)
    threading.Thread(target=_trim, name="attnviz-release-memory", daemon=True).start()


def _trim() -> None:
    from attnviz.ui.machinery import tuning

    tuning.release_free_memory()
