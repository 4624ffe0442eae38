"""Whether the text's head scores follow a result at once or wait for typing to pause: the cost of
the last dense scores of the same model, scaled by T² to the new result's length."""

from __future__ import annotations

SCORE_AT_ONCE_S = 0.015  # text scores expected to take at most this long follow each result at once


class ScoreTiming:
    """The rule for when the text's scores are taken (ScoreJobs._scores_on_result: score_jobs.py)."""

    def __init__(self):
        self.last = None  # (model, seconds, T): how long the text's last dense scores took, None before any

    def note(self, model, seconds: float, n_tokens: int) -> None:
        """Take `seconds` as the cost of `model`'s text scores at n_tokens (each scoring notes its
        own; a test notes a chosen one to check the rule on any machine)."""
        self.last = (model, seconds, n_tokens)

    def at_once(self, model, n_tokens: int) -> bool:
        """Whether `model`'s text scores at n_tokens are expected quick enough to follow the result
        at once: its last scores took at most SCORE_AT_ONCE_S, scaled by T² for a longer text (a
        model's first scores are taken at once: that measures them)."""
        cost = self.last
        if cost is None or cost[0] is not model:
            return True
        _model, seconds, T = cost
        return seconds * max(1.0, (n_tokens / max(T, 1)) ** 2) <= SCORE_AT_ONCE_S
