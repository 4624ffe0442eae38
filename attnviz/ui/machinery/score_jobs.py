"""The runner's head scores jobs ('roles'), for the roles panel and the grid's badges (the state's
section is ui/machinery/scores_state.py). The typed text's scores follow each result and the
exclusion options: right after the result (the next job on the pool, so the badges come back within
a few ms, and only the titles change) when the last scores of this model, scaled to the new length,
took at most SCORE_AT_ONCE_S (score_timing.py); otherwise once results have paused for
RESCORE_DELAY_MS (a long text: a keystroke must not queue behind its scores); a keystroke stops
the scores of the text before it (they would hold its run up on the pool). A probe source's
scores follow the options, the model and the training step, never the text (typing must not restart
a 60-sentence probe): a keystroke's run goes ahead of a probe under way, which pauses between two
layers or sentences (Runner.give_way) and goes on from there after it, its progress (layers
run, then sentences scored) going on from where it was, and its scores those of a probe run at
one go (the probe's sentences are fixed by its seed); a probe whose model or options changed
meanwhile stops there. Both are
pure engine calls on the pool, written into the state (set_text_scores, set_probe_scores); the
newest of each wins. A long text's scores (state.long: its
patterns streamed in row blocks) run on a thread of their own that gives way to the pool
(_score_long)."""

from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject, QTimer

from attnviz.engine.errors import Cancelled
from attnviz.engine.parallel import cores
from attnviz.ui.machinery.compare_jobs import compare_lacks
from attnviz.ui.machinery.runner import THREAD, describe_error, failure
from attnviz.ui.machinery.score_timing import ScoreTiming
from attnviz.ui.machinery.tuning import below_the_main_thread

log = logging.getLogger(__name__)

# the typed text's and a probe source's, newest of each wins
SCORES_KIND, PROBE_KIND = "roles", "roles-probe"
RESCORE_DELAY_MS = 150  # slow scores wait until results have paused this long (typing)
SCORES_AFTER_MS = 10  # quick scores (score_timing) follow once the result's frame is painted
FRAME_WAIT_MS = 1000  # quick scores waiting for a comparison's frame (scores_after_frame) at most
LONG_SCORES_YIELD_S = 0.01  # a long text's scores wait in steps of this while the pool runs a job


class ScoreJobs(QObject):
    """The head scores' jobs on the worker (ui/machinery/worker.py), following its state."""

    def __init__(self, worker):
        super().__init__(worker)
        self.worker = worker
        self.state = st = worker.state
        self._scores_timer = QTimer(self)
        self._scores_timer.setSingleShot(True)
        self._scores_timer.setInterval(RESCORE_DELAY_MS)
        self._scores_timer.timeout.connect(self.request_text_scores)
        self._scores_wait_frame = False  # the quick scores wait for a comparison's frame
        self._probe_cache = None  # (model, seed, (RunResult, note)): the random probe's last run
        self.score_timing = ScoreTiming()  # when the text's scores follow a result at once
        self._text_flags = (st.role_options.exclude_bos, st.role_options.exclude_current)  # newest text request's
        st.sigTextChanged.connect(self._scores_on_text)
        st.sigTextResultChanged.connect(self._scores_on_result)  # a dense result or a long run's
        st.sigComputeReported.connect(self._scores_on_report)
        st.sigRoleOptionsChanged.connect(self._scores_on_options)
        st.sigModelChanged.connect(self._scores_on_model)
        st.sigCheckpointChanged.connect(lambda _i: self.request_probe_scores())

    def _scores_on_text(self, _text) -> None:
        """A keystroke: the scores of the result before it are not waited for. Its run would
        queue behind them on the pool, and they would be greyed the moment its result came (not
        its patterns); the keystroke's result is scored in turn (_scores_on_result). A waiting
        one is not started, a queued one is skipped, a running one stops at its next role."""
        self._scores_timer.stop()
        self.worker.cancel(SCORES_KIND)

    def _scores_on_result(self, result) -> None:
        if result is None:  # the state drops the text's scores itself
            self._scores_timer.stop()
            self.worker.cancel(SCORES_KIND)
        elif self.state.scores_result is not result or self.state.scores_stale:
            quick = self.score_timing.at_once(self.state.model, result.n_tokens)
            if self.state.long.run is None and quick:
                # after the result's frame: submitting the job costs the main thread time (the
                # pool thread takes the GIL at once), and the job's Python slows whatever the main
                # thread does meanwhile; started at once, both would fall on the frame's own events
                # (Compare's frame comes later: scores_after_frame restarts the timer)
                self._scores_timer.start(FRAME_WAIT_MS if compare_lacks(self.worker, None) else SCORES_AFTER_MS)
                self._scores_wait_frame = compare_lacks(self.worker, None)
            else:
                self._scores_wait_frame = False
                self._scores_timer.start(RESCORE_DELAY_MS)  # restarts while results keep coming
        # else: the state kept its scores (the same patterns, run again for a view)

    def _scores_on_report(self, _request, message: str) -> None:
        """A run failed: the result still shown is scored if a keystroke stopped its scores."""
        if message and self.state.text_result is not None:
            self._scores_on_result(self.state.text_result)

    def _scores_on_options(self, opts) -> None:
        if (opts.exclude_bos, opts.exclude_current) != self._text_flags:
            self.request_text_scores()
        self.request_probe_scores()

    def _scores_on_model(self, _model) -> None:
        self._probe_cache = None
        self.worker.cancel(PROBE_KIND)
        self.request_probe_scores()

    def scores_after_frame(self) -> None:
        """The frame that follows a result is painted (Compare's comparison): the quick text
        scores that wait for it follow SCORES_AFTER_MS after it."""
        if self._scores_timer.isActive() and self._scores_wait_frame:
            self._scores_wait_frame = False
            self._scores_timer.start(SCORES_AFTER_MS)

    def flush_scores(self) -> None:
        """Score the text now if it waits for typing to pause (tests, before wait_idle)."""
        if self._scores_timer.isActive():
            self.request_text_scores()

    def request_text_scores(self) -> None:
        """Score the state's result with the roles options on the pool; the state holds them after."""
        st = self.state
        self._scores_timer.stop()
        model, result, opts = st.model, st.text_result, st.role_options
        self._text_flags = (opts.exclude_bos, opts.exclude_current)
        if model is None or result is None:
            self.worker.cancel(SCORES_KIND)
            return
        if result.n_tokens < 2:  # nothing to score: the panel says why
            self.worker.cancel(SCORES_KIND)
            st.set_text_scores(None, result)
            return
        H = _heads()
        if st.long.run is not None:  # a long text: its patterns streamed in row blocks
            self._score_long(model, st.long.run, opts)
            return

        job_id = self.worker.claim(SCORES_KIND)
        stale = lambda: not self.worker.is_newest(SCORES_KIND, job_id)  # noqa: E731  (a keystroke)

        def work():  # -> (HeadScores, seconds taken)
            t0 = time.perf_counter()
            scores = H.score_result(result, exclude_bos=opts.exclude_bos,
                                    exclude_current_token=opts.exclude_current,
                                    unknown_ids=H.unknown_token_ids(model), stop=stale)
            return scores, time.perf_counter() - t0
        self.worker.submit(SCORES_KIND, work, self._on_text_scores, (model, result, opts), job_id=job_id)

    def _score_long(self, model, run, opts) -> None:
        """A long run's text scores (heads.score_layers over each layer's row blocks, no [T, T]
        pattern held: every weight computed once, seconds to a minute at thousands of tokens), on
        threads of their own, one per core, below the main thread (as the pool's), that give way to
        the pool: before each block a thread waits while the pool runs a job (the next keystroke's
        run, an overview after a zoom), which would otherwise queue behind the scores; stopped
        between blocks once stale. The roles panel counts the layers done."""
        H, patterns, result = _heads(), run.patterns, run.result
        job_id = self.worker.claim(SCORES_KIND)
        pool = self.worker.pool
        n = patterns.n_layer
        lock, done = threading.Lock(), [0]

        def layer_blocks(layer):  # (a, rows [n_head, m, w]) of one layer, in order
            for a, rows in patterns.blocks(layer):
                while self.worker.is_newest(SCORES_KIND, job_id) and pool.activeThreadCount():
                    time.sleep(LONG_SCORES_YIELD_S)
                if not self.worker.is_newest(SCORES_KIND, job_id):
                    raise Cancelled("newer head scores are asked for")
                yield a, rows
            with lock:
                done[0] += 1
                self.worker.post(self._on_text_progress, job_id, done[0], n)

        def work():  # -> (HeadScores, None: the dense scores' cost model does not apply)
            below_the_main_thread()  # (the helper threads inherit it)
            self.worker.post(self._on_text_progress, job_id, 0, n)
            scores = H.score_layers(layer_blocks, n, patterns.n_head, result.input_ids,
                                    patterns.causal, exclude_bos=opts.exclude_bos,
                                    exclude_current_token=opts.exclude_current, tokens=result.labels,
                                    unknown_ids=H.unknown_token_ids(model), threads=cores())
            return scores, None
        self.worker.submit(SCORES_KIND, work, self._on_text_scores, (model, result, opts), THREAD,
                    job_id=job_id)

    def _on_text_progress(self, job_id: int, done: int, n: int) -> None:
        if self.worker.is_newest(SCORES_KIND, job_id):  # a cancelled or older job's count is not shown
            self.state.set_text_progress(done, n)

    def _on_text_scores(self, request, value, error) -> None:
        model, result, opts = request
        scores = None
        if error is None:
            scores, seconds = value
            if seconds is not None:
                self.score_timing.note(model, seconds, result.n_tokens)
        st, now = self.state, self.state.role_options
        # the text's scores depend on the exclusion flags only: a change of source meanwhile keeps them
        if (model is not st.model or result is not st.text_result
                or (opts.exclude_bos, opts.exclude_current) != (now.exclude_bos, now.exclude_current)):
            return  # another result or options are on their way
        if error is not None:
            log.warning("head scores failed: %s", describe_error(error))
            st.set_text_scores(None, result, failure("Could not compute the scores", describe_error(error)))
            return
        st.set_text_scores(scores, result)

    def request_probe_scores(self) -> None:
        """Score the probe source on the pool when the state has no scores of it (the random probe's
        run is cached per model and seed)."""
        from attnviz.engine.analysing.probes import PROBE_SEED, score_probe

        st = self.state
        model, opts = st.model, st.role_options
        if model is None or opts.source == "text" or st.probe_scores is not None or st.probe_note:
            if model is None or opts.source == "text":
                self.worker.cancel(PROBE_KIND)
            return
        job = self.worker.running(PROBE_KIND)
        if job is not None and job.request[0] is model and job.request[1] == opts:
            return  # already on its way
        cache = self._probe_cache
        cached = cache[2] if cache is not None and cache[0] is model and cache[1] == PROBE_SEED else None
        job_id = self.worker.claim(PROBE_KIND)
        report = lambda progress: self.worker.post(self._on_probe_progress, job_id, progress)  # noqa: E731
        stop = self.worker.giving_way(PROBE_KIND, job_id)  # (the jobs waiting on the pool go first)
        work = lambda: score_probe(model, opts.source, opts.exclude_bos, opts.exclude_current,  # noqa: E731
                                   probe=cached, progress=report, stop=stop)
        self.worker.submit(PROBE_KIND, work, self._on_probe_scores, (model, opts), job_id=job_id)

    def _on_probe_progress(self, job_id: int, progress) -> None:
        job = self.worker.running(PROBE_KIND)
        if job is not None and job.id == job_id:  # a cancelled or older probe's count is not shown
            self.state.set_probe_progress(progress)

    def _on_probe_scores(self, request, value, error) -> None:
        from attnviz.engine.analysing.probes import PROBE_SEED

        model, opts = request
        st = self.state
        if model is not st.model or opts != st.role_options:
            return  # scored for another model or options: never shown
        if error is not None:
            log.warning("probe scores failed: %s", describe_error(error))
            st.set_probe_scores(None, failure("Could not compute the scores", describe_error(error)))
            return
        scores, probe = value
        if probe is not None:
            self._probe_cache = (model, PROBE_SEED, probe)
        st.set_probe_scores(scores, probe[1] if probe is not None else "")


def _heads():  # the engine's head scores, imported when first scored (not at the window's start)
    from attnviz.engine.analysing import heads
    return heads
