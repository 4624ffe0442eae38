"""onerow_pair's choice between its two threads and one for each call of a run's layers (the
Fallback onerow_stack keeps per model and layer range; onerow_pair's docstring says how it
chooses). Plain Python: it times calls, it runs none.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

log = logging.getLogger(__name__)

PAYS = 1.0  # the pair kept while no slower than this times one thread (else a core idles)
PAIR_RUNS = 2  # pair calls a decision looks at (the faster: one late wake-up is no verdict)
PROBE = 16  # pair calls between one-thread calls renewing the reference (each costs a gain)
BACKOFF = 4  # one-thread calls after the pair failed, doubled while it fails (a try costs one)
MAX_BACKOFF = 64  # at most: a core freed again is used within as many calls
TAKEN = {"pair": 0, "one": 0}  # the calls every Fallback chose, each way (tests, benchmarks)
_COUNTING = threading.Lock()  # TAKEN's: two models' Fallbacks may record at once


class Fallback:
    """The pair or one thread for a run's next call (module docstring): take_pair() before it,
    record(pair, seconds) after it (what it took and how long)."""

    def __init__(self):
        self._ones, self._pairs = deque(maxlen=2), deque(maxlen=PAIR_RUNS)
        self._wait, self._backoff, self._since = 0, BACKOFF, 0
        self._p = -1  # the position of the last call asked about
        self._lock = threading.Lock()

    def take_pair(self, p: int | None = None) -> bool:
        """Whether the next call (of the row at position p) takes the pair. A position before the
        last one's is a new run (a new generation): the times measured at longer ones go, and its
        first call takes one thread for a reference of its own."""
        with self._lock:
            if p is not None:
                if p < self._p:
                    self._ones.clear()
                    self._pairs.clear()
                    self._wait, self._backoff, self._since = 0, BACKOFF, 0
                self._p = p
            return bool(self._ones) and self._wait == 0 and self._since < PROBE

    def record(self, pair: bool, seconds: float) -> None:
        with _COUNTING:
            TAKEN["pair" if pair else "one"] += 1
        with self._lock:
            if not pair:
                self._ones.append(seconds)
                self._wait, self._since = max(0, self._wait - 1), 0
                return
            self._since += 1
            self._pairs.append(seconds)
            if len(self._pairs) < PAIR_RUNS:
                return
            if min(self._pairs) <= PAYS * min(self._ones):
                self._backoff = BACKOFF
                return
            self._wait, self._backoff = self._backoff, min(2 * self._backoff, MAX_BACKOFF)
            log.info("two threads slower than one (%.2f ms against %.2f ms): one thread for %d calls",
                     1e3 * min(self._pairs), 1e3 * min(self._ones), self._wait)
            self._pairs.clear()
