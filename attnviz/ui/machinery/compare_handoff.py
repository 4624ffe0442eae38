"""A's run handed from its 'compute' job to the Compare session's 'compare' job queued behind it
(ui/machinery/compare_jobs.py: CompareJobs.follow), or kept for a B that opens on its text."""

from __future__ import annotations


class Handoff:
    """A's run handed from its 'compute' job `compute_id` to the 'compare' job queued behind it on
    the pool's one thread (CompareJobs.follow): kept by A's job as it ends, read by the next job.
    Made too while no B is open (no follower): the run is then kept noted, for a B that opens on
    its text (CompareJobs._on_loaded compares it as it is)."""
    __slots__ = ("compute_id", "run", "follower", "dense_limit", "model", "noted")

    def __init__(self, compute_id: int, follower, dense_limit: int | None = None, model=None):
        self.compute_id = compute_id
        self.run = None  # A's WindowRun (None: A's run failed or was stopped; a LongRun: a long text)
        self.follower = follower  # the session's pair.Follower: B's cache follows each run of A's
        self.dense_limit = dense_limit  # the dense limit A's run is made under (B's runs take it)
        self.model = model  # A
        self.noted = None  # without a follower: A's clean run as pair.noted read it as it ended

    def ran(self, clean, result) -> None:
        """A's clean run is in (effects.window_run's `ran`): noted for B's cache, on the pool's
        thread as B's runs that follow it, even where A's job is then stopped in its changed run."""
        if self.follower is None:
            from attnviz.engine.analysing.pair import noted

            self.noted = noted(self.model, clean, result.cache_used, self.dense_limit)
        else:
            self.follower.note(clean, result.cache_used, self.dense_limit)

    def keep(self, run):
        self.run = run
        return run

    def kept_run(self, model, text: str, request):
        """An encoder's first run of `text` (its model's first, which no effects view asked to
        keep): made keeping the residual stream too (what a comparison reads beside the patterns),
        and kept as a clean WindowRun, so a B that opens on this text compares it as it is (an
        encoder's run is always whole).
        -> the RunResult the grid shows (or the LongRun of a long text, kept as nothing)."""
        from attnviz.engine.analysing.compare import compare_trace
        from attnviz.engine.analysing.effects import CLEAN, WindowRun
        from attnviz.engine.computing.run_result import RunResult

        trace = compare_trace()
        result = model.run(text, request=request, trace=trace)
        if isinstance(result, RunResult):
            self.ran(trace, result)
            self.keep(WindowRun(result, trace, None, CLEAN, dense_limit=self.dense_limit))
        return result


def not_compared(run) -> str | None:
    """The Compare panel's note on A's run `run` handed over with nothing to compare: a long text's
    (None: A's run failed or was stopped, which A's own report of it says)."""
    from attnviz.engine.computing.longdoc import LongRun
    from attnviz.engine.reading.token_text import tokens

    if isinstance(run, LongRun):
        return (f"Not compared: a long text ({tokens(run.patterns.T)}) runs without its whole attention "
                "patterns. Compare waits for a text of dense size.")
    return None
