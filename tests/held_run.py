"""A run of a model that holds its KV cache lock until released (a window's run of the text the
moment another thread runs): Model.run asks the trace's stop() before each layer, inside the lock,
so the run waits there, and is then cancelled (a keystroke run a newer one replaced: the cache
keeps its last whole run). Drives the race on purpose instead of hoping it happens."""

import threading

from attnviz.engine.errors import Cancelled
from attnviz.engine.computing.request import RunRequest


class HeldRun:
    def __init__(self, model, ids):
        self.inside, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(model, ids), daemon=True)

    def _run(self, model, ids):
        def stop():
            self.inside.set()
            self.release.wait()
            return True
        try:
            model.run(ids=ids, request=RunRequest(stop=stop))
        except Cancelled:
            pass

    def start(self) -> None:
        """Start it and return once it holds the lock."""
        self.thread.start()
        assert self.inside.wait(30), "the held run never reached its first layer"

    def end(self) -> None:
        self.release.set()
        if self.thread.ident is not None:  # (started)
            self.thread.join(30)
