"""Two jobs on a job runner's pool in turn (the give_way tests): a long one submitted first, a
short one once the long one has started, and a count of the steps at work at once."""

import threading

WAIT = 20000


def long_then_short(qtbot, runner, long_job, short_job, started, queued, kinds=("long", "short")):
    """Submit `long_job`; once it has `started`, submit `short_job` and let the long one go on
    (`queued`) -> the two results, in the order they came, once both are in."""
    results = []
    runner.submit(kinds[0], long_job, lambda _r, value, _e: results.append(value))
    qtbot.waitUntil(started.is_set, timeout=WAIT)
    runner.submit(kinds[1], short_job, lambda _r, value, _e: results.append(value))
    queued.set()
    qtbot.waitUntil(lambda: len(results) == 2, timeout=WAIT)
    return results


class AtWork:
    """Steps counted at work all along them: `most` at once, `steps` in the order they began."""

    def __init__(self):
        self._lock, self._now, self.most, self.steps = threading.Lock(), 0, 0, []

    def step(self, name: str, then=lambda: None) -> None:  # a step's compute: then() inside it
        with self._lock:
            self._now += 1
            self.most = max(self.most, self._now)
        self.steps.append(name)
        then()
        with self._lock:
            self._now -= 1
