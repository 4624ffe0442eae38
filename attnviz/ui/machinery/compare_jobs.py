"""Compare: model B beside the loaded model A, following typing (the panel is
ui/panels/compare_panel.py; the metrics engine/analysing/compare.py).

While B is open, each typing run of A keeps its residual stream (the runner's run then is a
WindowRun, as for What heads do), and a 'compare' job on the one runner runs B on the same ids with
B's own KV cache kept in step with A's (pair.Follower: B runs each of A's runs, in A's order, the
way A's ran and keeping what A's kept, a run of A whose comparison a newer key stopped among them;
as B opens, A's run on screen is B's first to follow where A's cache holds it whole, every row
computed in one chunk and nothing since, or any run of an encoder that kept the residual stream
(its model's first, Handoff.kept_run, or a WindowRun) (pair.whole_in_cache: A's run is compared as
it is); otherwise both caches are cleared and A's text run again, so A's rows and B's first run are
one chunk alike; and where B is more than pair.MAX_BEHIND runs behind, after a text B refused, or
where a run of B reused another number of rows than A's, the comparison clears both caches and runs
the text afresh on each side, and compares those runs): a model compared with itself differs by
exactly 0, once the one-row steps' warm-up ends, where the memory budget holds both models' layers
alike (docs/compare.md). The job then compares the two traces: both runs per keystroke, newest wins
(a keystroke makes the running job stale and it stops at B's next layer). The 'compare' job is
queued on the pool right behind A's run (follow): B starts as A ends, on the pool's thread. The
next-token numbers (KL over the whole vocabulary, same top-1, flips) follow each comparison as a job of their own ('compare-next'), for the new
positions only: a position whose final-norm inputs on both sides are bit for bit those of the last
numbers keeps its numbers (compare_tokens.next_tokens). The next keystroke stops the job at the
unembedding's next block, so a keystroke's runs wait for one block at most. The induction heads are
compared once per B, on the probe ('compare-probe'), which does not depend on the text: a
keystroke's runs go ahead of it, the probe pausing between two layers (Runner.give_way). B loads on
a thread of its own ('compare-load'); a B that does not open, has another vocabulary or shape, or
does not fit in the memory budget beside A is refused in one line and nothing else changes. Closing
Compare, or a new model A, frees B and hands the memory it held back to the system
(compare_b.release_when_freed). A moved to another training step keeps B and compares the new A
with it afresh (a_changed)."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, Signal

from attnviz.ui.machinery.compare_b import give_back, load_b
from attnviz.ui.machinery.compare_handoff import Handoff, not_compared
from attnviz.ui.machinery.job import shared_relay
from attnviz.ui.machinery.runner import POOL, THREAD, describe_error, failure
from attnviz.ui.machinery.tuning import release_free_memory, wide_blas
from attnviz.engine.errors import AttnvizError, Cancelled

log = logging.getLogger(__name__)

COMPARE_KIND, NEXT_KIND, LOAD_KIND, PROBE_KIND = "compare", "compare-next", "compare-load", "compare-probe"
_FRAME = QEvent.Type(QEvent.registerEventType())  # posted behind a comparison's paints: CompareJobs._frame_painted
MODES = ("A", "B", "A-B")
MODE_TITLES = {"A": "A", "B": "B", "A-B": "A \u2212 B"}  # as the grid and the panel label them


@dataclass(frozen=True)
class BSource:
    """What B is opened from: kind "model" (a name, folder or file), "checkpoint" (A's model at
    index `value`) or "quantized" (A quantized in memory to type `value`)."""
    kind: str
    value: object

    def describe(self, a_name: str) -> str:
        if self.kind == "quantized":
            return f"{a_name} quantized to {self.value}"
        if self.kind == "checkpoint":
            return f"{a_name} at checkpoint {self.value}"
        return str(self.value)

    def to_json(self) -> dict:
        return {"kind": self.kind, "value": self.value}


def side_name(model) -> str:
    """How Compare names one side: the model's name, and its training step where it has them
    (as `attnviz compare` names it: "… at checkpoint 16 of 0..32 (step 1020)")."""
    from attnviz.engine.computing.checkpoints import checkpoint_words

    return model.name + checkpoint_words(model)


@dataclass(frozen=True)
class Comparison:
    """One keystroke's comparison: A's shown result, B's patterns on the same ids, the metrics."""
    result: object  # A's RunResult (its text, tokens and labels)
    a_attentions: np.ndarray  # [n_layer, n_head, T, T] A's clean run (no heads switched off), or its
    # run made afresh where B could not follow (pair.Follower)
    b_attentions: np.ndarray  # [n_layer, n_head, T, T]
    doc: dict | None  # compare.compare(pair) without induction (None: fewer than 2 tokens)
    seconds: float  # B's run and the metrics
    pair: object = None  # the engine's Pair (its traces), for the next-token numbers
    seen: tuple | None = None  # compare.head_numbers' seen: what the next keystroke's reuses
    tops: tuple | None = None  # ([T], [T]) A's and B's top-1 next token ids, with the next-token numbers


def compare_lacks(worker, result) -> bool:
    """Whether `worker`'s Compare session is open and A's runs keep the residual stream for it
    (`result`: whether this one lacks it; None: whether runs must keep it)."""
    compare = getattr(worker, "compare_jobs", None)  # (a runner that does not follow the state: none)
    return compare is not None and compare.active and (result is None or compare.lacks(result))


class CompareJobs(QObject):
    """The Compare session: B, its identity, the newest comparison, the mode the panel shows."""
    sigChanged = Signal()  # B opened or closed, a new comparison, the mode, the induction, a note
    sigNumbers = Signal()  # the next-token numbers of the comparison on screen came in (nothing else changed)

    def __init__(self, worker):
        super().__init__(worker)
        self.worker, self.state = worker, worker.state
        self.b = None  # model B
        self.identity: dict | None = None  # compare.identity of B
        self.source: BSource | None = None
        self.loading: BSource | None = None
        self.comparison: Comparison | None = None
        self.induction: dict | None = None  # compare.induction on the probe
        self.mode = "A-B"
        self.note = ""  # one line: why B did not open, or why there is no comparison
        self.failed: str | None = None  # why the last comparison asked for failed, A's run too (None: it did not)
        self.long_text = False  # A's last run is a long text's, which is not compared
        self.last_s = 0.0
        self._known = None  # compare_tokens.next_token_numbers' `seen` of the last numbers: what is reused
        self._frame_of = None  # the comparison whose frame's paints are awaited (_FRAME)
        self._handoff: Handoff | None = None  # the newest run a queued 'compare' job follows
        self._follower = None  # pair.Follower of A's runs for B's cache, made as B opens
        self._beside = None  # the A a B loaded for Compare is open beside (its budget lowered for B's)
        st = self.state
        st.sigTextChanged.connect(self._on_text)
        st.effects.sigRunChanged.connect(self._on_run)
        st.sigResultChanged.connect(self._on_result)
        st.sigModelChanged.connect(lambda _m: self.close())
        st.sigComputeReported.connect(self._on_reported)
        st.sigCheckpointsChanged.connect(lambda _c: self._rest_steps())  # (preloaded after B opened)

    @property
    def active(self) -> bool:
        return self.b is not None

    def lacks(self, result) -> bool:
        """Whether A's `result` lacks what the comparison reads (its run's residual stream)."""
        return self.active and result is not None and self.state.effects.run_of(result) is None

    # --- B ------------------------------------------------------------------------------------
    def open(self, source: BSource) -> None:
        """Load B from `source` beside A on a thread of its own; A stays as it is meanwhile."""
        a = self.state.model
        if a is None:
            return
        self.loading = source
        self.note = f"Loading {source.describe(a.name)}…"
        self.sigChanged.emit()
        relay = shared_relay()  # (asked for here, on the main thread: B may be freed on any)
        ckpts = self.state.checkpoints  # (the set A is a step of, as the Compare menu lists it)
        self.worker.submit(LOAD_KIND, lambda: load_b(a, source, relay, ckpts), self._on_loaded, (a, source), THREAD)

    def _on_loaded(self, request, value, error) -> None:
        from attnviz.engine.analysing.pair import Follower

        a, source = request
        if source is not self.loading:  # (closed, or another B asked for since: A never lowered)
            return
        self.loading = None
        if error is None:
            second, self.identity = value
            if self._beside is not None:  # (the B open before let go: A's budget whole, then this B's split)
                give_back(self._beside, self.b)
            self.b, self._beside = second.model, (a if second.own else None)
            try:
                if a is self.state.model:  # (A's budget lowered beside B only now that B is kept)
                    self._rest_steps(a)  # (first: the split counts none of the steps' layers)
                    second.accept(a)
                else:  # A moved to another training step as B loaded: B, kept, beside it
                    a = self._follow_new_a(a, second)
            except AttnvizError as exc:  # (a budget chosen as B loaded, too small for both: none kept)
                self.close()
                error = exc
        if error is not None:  # the app stays as it was, B included (but where closed just above)
            self.note = failure(f"Could not compare with {source.describe(a.name)}", describe_error(error))
            self.sigChanged.emit()
            return
        self.source, self.note = source, ""
        shown, self._handoff = self._shown_run(a), None
        self.comparison = self.induction = self._known = self.failed = None
        self.long_text = False
        self.worker.claim(COMPARE_KIND)  # the jobs before, stale: none runs on the caches cleared
        if shown is None:  # (else no run of A is on its way: the one shown is the newest)
            self.worker.claim("compute")
        # A's run on screen, where its cache holds it whole, is B's first to follow; else the
        # caches are cleared and A's text runs again, in one chunk as B's first run
        self._follower = Follower(a, self.b, None if shown is None else shown.noted)
        self.sigChanged.emit()
        self._request_probe()
        if self._follower.took_last:
            self._submit(lambda: shown.run, None)
        else:
            self.worker.request_compute(immediate=True)

    def _shown_run(self, a) -> Handoff | None:
        """The handoff of A's run on screen, made by the newest 'compute' job for the text shown
        and kept whole (its trace: the residual stream the comparison reads), else None."""
        from attnviz.engine.analysing.effects import WindowRun

        h, st = self._handoff, self.state
        if h is None or h.noted is None or h.model is not a or not isinstance(h.run, WindowRun):
            return None
        shown = st.result is not None and st.result is h.run.result  # (an encoder's: no effects run)
        return h if shown and h.run.result.text == st.text and self.worker.is_newest("compute", h.compute_id) else None

    def close(self) -> None:
        """Leave Compare: B is freed (nothing holds it after this, once the jobs let go now have
        ended), the pages its arrays held then handed back to the system (compare_b.release_when_freed),
        its jobs dropped."""
        for kind in (COMPARE_KIND, NEXT_KIND, PROBE_KIND, LOAD_KIND):
            self.worker.cancel(kind)
        had = self.b is not None or self.loading is not None or self.note
        if self.b is not None:  # (quick text scores waiting for a comparison's frame)
            self.worker.scores_after_frame()
        if self._handoff is not None and self._handoff.follower is not None:  # (it holds B)
            self._handoff = None  # (one made without B stays: A's run, for the next B to open)
        if self._beside is not None:  # (A's budget, lowered beside B, whole again)
            give_back(self._beside, self.b)
        self.b = self.identity = self.source = self.loading = self._follower = self._beside = None
        self.comparison = self.induction = self._known = self.failed = None
        self.long_text = False
        self.note = ""
        if had:
            self.sigChanged.emit()

    def a_changed(self) -> None:
        """A is another training step now (the state's model changed, its shape and vocabulary
        not): B, unchanged, follows the new A afresh, both caches cleared (pair.Follower), and
        nothing of the old A's comparison, numbers or probe stays on screen meanwhile. Called
        before the new A's run is asked for (Worker._on_checkpoint): that run is B's first."""
        from attnviz.engine.analysing.pair import Follower

        a = self.state.model
        if self.b is None or a is None:
            return
        for kind in (COMPARE_KIND, NEXT_KIND, PROBE_KIND):
            self.worker.cancel(kind)
        self._handoff, self._frame_of = None, None
        self.comparison = self.induction = self._known = self.failed = None
        self.long_text = False
        self._follower = Follower(self._follow_new_a(self._follower.a), self.b)
        self.note = f"A is now {side_name(a)}: comparing it with B again\u2026"
        self.worker.scores_after_frame()  # (quick text scores waiting for the old comparison's frame)
        self.sigChanged.emit()
        self._request_probe()

    def _follow_new_a(self, old, second=None):
        """B beside the state's model (another step of `old`), not `old`: where Compare loaded B for
        itself, the budget split with the new A, `old`'s whole again (pair_memory.move_beside), or
        one chosen since B (`second`) began to load split (Second.reshare). -> the new A."""
        from attnviz.engine.analysing.pair_memory import move_beside
        from attnviz.engine.reading.memory_budget import chosen_budget

        a = self.state.model
        if self._beside is not None:
            self._rest_steps(a)  # (`old` first: what auto gives it alone counts none of its layers)
            move_beside(old, a, self.b, chosen_budget())
            self._beside = a if self.b is not a else None
            if second is not None:
                second.reshare(a)
        return a

    def _rest_steps(self, a=None) -> None:
        """The training steps the window keeps loaded, but A (`a`, else the one B is beside) and
        B, let go of their float32 layers while the budget is split between A and a B loaded for
        Compare (pair_memory.rest_steps)."""
        from attnviz.engine.analysing.pair_memory import rest_steps

        ckpts = self.state.checkpoints
        if self._beside is not None and self.b is not None and ckpts is not None:
            rest_steps(ckpts.loaded(), (a or self._beside, self.b))

    @property
    def budget_shared(self) -> bool:
        """Whether the memory budget (a size or auto) is split between A and a B loaded for Compare."""
        return self._beside is not None

    def share_budget(self, n_bytes: int | None) -> bool:
        """Models > Memory budget `n_bytes` (a size, None: auto) while Compare holds a B loaded
        for itself: split between A and B (pair_memory.share_budget, InputError where B gets less
        than a layer; share_auto). -> False where there is no such B."""
        from attnviz.engine.analysing.pair_memory import share

        if self._beside is None or self.b is None:
            return False
        share(self._beside, self.b, n_bytes)
        return True

    def set_mode(self, mode: str) -> None:
        if mode in MODES and mode != self.mode:
            self.mode = mode
            self.sigChanged.emit()

    # --- the comparison per run -----------------------------------------------------------------
    def handoff(self, compute_id: int, dense_limit: int | None = None, model=None) -> Handoff:
        """What A's run `compute_id` (the worker's 'compute' job, about to be submitted, under
        `dense_limit`, of `model`: A) hands to its comparison (follow), or keeps for a B yet to open."""
        return Handoff(compute_id, self._follower if self.active else None, dense_limit, model)

    def follow(self, handoff: Handoff) -> None:
        """The comparison of A's run handoff.compute_id (submitted just before this, on the pool's
        one thread), queued right behind it: B starts as A's run ends, on the same thread, while
        the window takes A's result. Stale, and stopped at B's next layer, as soon as a newer
        'compute' or 'compare' job is asked for (a keystroke). No B open: the run is kept for one
        that opens on its text (_on_loaded)."""
        self._handoff = handoff
        if self.active:
            self._submit(lambda: handoff.run, handoff.compute_id)

    def _on_run(self, run) -> None:
        """A's new run (its trace kept) that no queued comparison follows (none was asked for as
        it was submitted): B on the same ids, and the metrics, on the pool. No B open: the run
        kept for one (follow) is let go once another, or none, is the effects views' run, or once
        it is another model's (a switch while A's job was on: its run never came)."""
        if not self.active:
            h = self._handoff
            if h is not None and (h.run is not run or h.model is not self.state.model):
                self._handoff = None
            return
        if run is None or (self._handoff is not None and self._handoff.run is run):
            return
        self._submit(lambda: run, None)

    def _on_result(self, result) -> None:
        """No B open: a run kept for one whose result is no longer the one shown is let go (a B
        opens only on the run shown: an encoder's first run, never an effects views' run, was
        held for the model's whole session)."""
        h = self._handoff
        if not self.active and h is not None and h.run is not None and getattr(h.run, "result", None) is not result:
            self._handoff = None

    def _submit(self, run_of, compute_id: int | None) -> None:
        """B's run on the ids of A's run `run_of()` (a WindowRun, read on the pool as the job
        starts; anything else, or None, compares nothing) and the metrics, newest wins; with
        `compute_id`, stale too once that run of A is no longer the newest."""
        from attnviz.engine.analysing import compare as C
        from attnviz.engine.analysing.effects import WindowRun
        from attnviz.engine.analysing.pair import Pair, Run

        a, b, worker, follower = self.state.model, self.b, self.worker, self._follower
        job_id = worker.claim(COMPARE_KIND)
        known = None if self.comparison is None else self.comparison.seen  # (the same A and B)

        def stale():
            return not worker.is_newest(COMPARE_KIND, job_id) or (
                compute_id is not None and not worker.is_newest("compute", compute_id))

        def work():
            run = run_of()
            if not isinstance(run, WindowRun) or stale():  # (A's run failed, stopped, or was long)
                return not_compared(run) if not stale() else None
            t0 = time.perf_counter()
            result, ids = run.result, run.result.input_ids
            with wide_blas():  # as A's typing run: a decoder's keystroke streams every weight
                clean, trace = follower.follow(run.clean, C.compare_trace, stale, run.result.cache_used,
                                               run.dense_limit)  # (B's runs under A's limit)
            pair = Pair(Run("A", a, ids, clean), Run("B", b, ids, trace))
            doc = seen = None
            if not (a.config.causal and len(ids) < 2):  # the earlier positions' rows reused
                doc, seen = C.head_numbers(pair, known)
            else:  # (no next-token job follows, which hands the freed pages back once a keystroke)
                release_free_memory()
            return Comparison(result, clean.attentions, trace.attentions, doc,
                              time.perf_counter() - t0, pair, seen)
        worker.submit(COMPARE_KIND, work, self._on_compared, (a, b), POOL, job_id=job_id)

    def _on_compared(self, request, value, error) -> None:
        a, b = request
        if a is not self.state.model or b is not self.b:
            return
        if isinstance(value, str):  # A's run was a long text's: nothing comes to compare
            self.long_text, self.failed, self.note = True, None, value
            self.sigChanged.emit()
        if isinstance(error, Cancelled) or (error is None and not isinstance(value, Comparison)):
            # no run of A to compare, or a newer keystroke replaced A's: no frame follows
            self.worker.scores_after_frame()
            return
        if error is not None:
            self.failed = describe_error(error)
            self.note = failure("Could not compare", self.failed)
            self.sigChanged.emit()
            self.worker.scores_after_frame()
            return
        self.comparison, self.last_s, self.failed, self.long_text = value, value.seconds, None, False
        self.note = "" if value.doc is not None else "Type at least two tokens to compare the heads"
        self.sigChanged.emit()  # (the panel paints it in this turn)
        # the pool's next jobs (the next-token numbers, the text's head scores) after this frame's
        # posted paints, the grid's A − B among them (posted at low priority, as Qt posts a
        # window's update requests; events of one priority come in order): a job's Python would
        # hold the GIL they need
        if self._frame_of is None:
            QCoreApplication.postEvent(self, QEvent(_FRAME), Qt.EventPriority.LowEventPriority.value)
        self._frame_of = value

    def _on_reported(self, request, message: str) -> None:
        """The newest run of A failed (its last good result stays shown): no comparison of its
        text comes, and the selector and the note say why, not that one is on its way."""
        if message and self.active and request.model is self.state.model:
            self.failed, self.long_text = message, False
            self.note = failure("A's run of the text failed, so nothing is compared", message)
            self.sigChanged.emit()

    def event(self, ev) -> bool:
        if ev.type() == _FRAME:
            self._frame_painted()
            return True
        return super().event(ev)

    def _frame_painted(self) -> None:
        """The comparison's frame is painted: its next-token numbers, where it is still the one on
        screen and the text the one compared (a newer keystroke's runs must not queue behind
        them), and the text scores waiting for the frame."""
        c, self._frame_of = self._frame_of, None
        if c is not None and c is self.comparison and c.doc is not None and c.result.text == self.state.text:
            self._request_next()
        self.worker.scores_after_frame()

    def _on_text(self, _text) -> None:
        """A keystroke: the next-token numbers of the text before it stop at their next block (they
        would hold up its runs on the pool)."""
        self.worker.claim(NEXT_KIND)

    def _request_next(self) -> None:
        """KL, same top-1 and flips of the comparison on screen, on the pool (newest wins), the
        shared prefix with the last ones reused."""
        from attnviz.engine.analysing import compare_tokens as NT

        c, known = self.comparison, self._known
        if c is None or c.doc is None:
            return
        job_id = self.worker.claim(NEXT_KIND)
        def stale():
            return not self.worker.is_newest(NEXT_KIND, job_id)

        def work():
            out = NT.next_token_numbers(c.pair, known, stale)
            release_free_memory()
            return out
        self.worker.submit(NEXT_KIND, work, self._on_next, c, POOL, job_id=job_id)

    def _on_next(self, c, value, error) -> None:
        if c is not self.comparison:
            return
        if error is not None:
            self.note = failure("Could not compute the next-token numbers", describe_error(error))
            self.sigChanged.emit()
            return
        numbers, self._known = value
        nt = None if self._known is None else self._known[1]  # (compare_tokens.NextTokens)
        self.comparison = dataclasses.replace(c, doc={**c.doc, **numbers},
                                              tops=None if nt is None else (nt.top_a, nt.top_b))
        self.sigNumbers.emit()

    def _request_probe(self) -> None:
        from attnviz.engine.analysing import compare as C

        a, b = self.state.model, self.b
        job_id = self.worker.claim(PROBE_KIND)
        stop = self.worker.giving_way(PROBE_KIND, job_id)  # (the jobs waiting on the pool go first)

        def work():
            return C.induction(C.probe_pair(a, b, stop=stop))
        self.worker.submit(PROBE_KIND, work, self._on_probe, (a, b), POOL, job_id=job_id)

    def _on_probe(self, request, value, error) -> None:
        a, b = request
        if a is not self.state.model or b is not self.b:
            return
        if error is not None:
            log.info("induction comparison failed: %s", describe_error(error))
            return
        self.induction = value
        self.sigChanged.emit()

    # --- what the panel and an export read ---------------------------------------------------------
    def difference(self, layer: int) -> np.ndarray | None:  # -> [n_head, T, T] A - B
        c = self.comparison
        if c is None:
            return None
        return c.a_attentions[layer] - c.b_attentions[layer]
