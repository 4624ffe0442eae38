"""Model loads as the worker runs them (ui/machinery/worker.py) on threads of their own: a load
checked by a trial run before the window takes the model, and a model's training checkpoints with
every checkpoint's weights preloaded.

A load is told the text the window will run first: a GGUF file's SentencePiece vocabulary then
builds a tokenizer for that text (the same tokens: engine/reading/gguf_model.py gguf_tokenizer),
which takes a fraction of the whole vocabulary's build, and the window's first result does not
wait for the rest; the worker builds the whole one after the first analysis (make_vocabulary_whole).
A keystroke's new text meanwhile does not wait for it either: it gets a tokenizer built for it the
same way (the same tokens: engine/reading/tokenizer.py TextTokenizer's `for_text`), and the whole
one once it is built. Likewise the quantised kernels: a load warms those
a run of a few rows takes (the window asks for the rest later: ui/app.py assemble), and the
worker warms their serial twins and the one-row steps after the first analysis, or as a Generate
starts where that has not come yet, so the generation's later steps take them (warm_the_rest). A
keystroke's one-row run does not wait for them: until they are warm it takes the layer loop on the
few-row kernels the load warmed (engine/computing/qmatvec.py takes_layer), within the kernels'
bound of the float32 pass as a run on the one-row steps is, and the one-row steps once they are
warm (where no warm-up of their block types has begun, as when the first analysis never came or
for a Compare's B, the first such run starts one: qmatvec.takes_layer). A run chooses once, and
Compare's B takes the steps A's run of the keystroke took (Trace.one_row)."""

from __future__ import annotations

import html.entities  # noqa: F401  (see below)
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass

from attnviz.engine.computing.request import RunRequest


# Packages that the kernels' module (numba, imported on a load's thread when it packs a GGUF model)
# and the window's widgets (pyqtgraph, imported on the main thread meanwhile) both import, and whose
# __init__ imports a submodule of its own: CPython's module locks deadlock when one thread imports
# the package while another imports that submodule (the second fails with KeyError in
# _find_and_load), so they are imported here, on the main thread, before a load starts.
try:
    import colorama  # noqa: F401
except ImportError:  # (neither imports it then)
    pass


@dataclass(frozen=True)
class LoadRequest:
    id: int
    source: str  # a model name or a folder
    text: str = ""  # the text the window runs first ("": none known)


def checkpoints_of(model):  # -> CheckpointSet | None, every checkpoint's weights loaded
    from attnviz.engine.computing.checkpoints import load_checkpoints

    ckpts = load_checkpoints(model)
    if ckpts is not None:
        ckpts.preload()
    return ckpts


TRIAL_IDS = 3  # token ids a freshly loaded model runs before the window takes it


def load_checked(source: str, text: str = ""):
    """load_model (its tokenizer built for `text` first, where the file's vocabulary can: module
    docstring), then a trial run on a few token ids: a model whose weights are finite but give
    non-finite patterns (a 1e38 weight overflows in q.k) is refused here, as a load that failed, so
    the window keeps the model, sentence and heatmaps it had, rather than take a model it cannot
    show."""
    import numpy as np

    from attnviz.engine import load_model

    model = load_model(source, text=text or None)
    with np.errstate(all="ignore"):  # the engine names the broken layer itself
        model.run(ids=list(range(min(TRIAL_IDS, int(model.config.vocab_size)))),
                  request=RunRequest(use_cache=False))
    return model


VOCABULARY_KIND = "vocabulary"  # the runner's job of make_vocabulary_whole


def make_vocabulary_whole(worker, model) -> None:
    """Build `model`'s tokenizer for every text on a thread of its own below the main thread
    (a job of `worker`, the app's runner), where its load built it for one text; once per model."""
    from attnviz.ui.machinery.runner import THREAD
    from attnviz.ui.machinery.tuning import below_the_main_thread

    tok = getattr(model, "tokenizer", None)
    if tok is None or getattr(tok, "for_every_text", True) or worker.running(VOCABULARY_KIND) is not None:
        return

    def work():
        below_the_main_thread()
        with switching_often():
            complete_vocabulary(model)
    worker.submit(VOCABULARY_KIND, work, lambda *_: None, model, THREAD)


QUICK_SWITCH_S = 0.0005  # the interpreter's switch interval while the whole vocabulary is built


@contextmanager
def switching_often():
    """The interpreter's switch interval (sys.setswitchinterval) at most QUICK_SWITCH_S inside,
    then put back unless someone set another meanwhile. The whole vocabulary's build holds the GIL
    in its loops; a thread that lets the GIL go (the main thread painting a keystroke's result,
    through each Qt call; a keystroke's run, through each NumPy step) waits up to one interval
    to take it back, every time: at the default 5 ms, many times the keystroke's own work."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(min(old, QUICK_SWITCH_S))
    quick = sys.getswitchinterval()  # (as stored: whole microseconds)
    try:
        yield
    finally:
        if sys.getswitchinterval() == quick:
            sys.setswitchinterval(old)


def complete_vocabulary(model) -> None:
    """The model's tokenizer for every text, where the load built it for one text only (its
    `raw` builds the whole vocabulary once, under its lock: a keystroke's text meanwhile gets a
    tokenizer built for it, and only a text too long for one waits for this build)."""
    tok = getattr(model, "tokenizer", None)
    if tok is not None and not getattr(tok, "for_every_text", True):
        tok.raw


WARM_KIND = "kernels-warm"  # the runner's job of warm_the_rest


class WarmUp:
    """warm_the_rest's job as it runs: its model, and its thread's priority, below the main
    thread's until a generation asks for it (hurry), the asker's from then on; `work`: the
    warm-up itself (safe on two threads at once: each step is taken once, qmatvec.warm)."""

    def __init__(self, model, hurried: bool, work):
        self.model, self.work, self._hurried, self._thread = model, work, hurried, None
        self._lock = threading.Lock()  # (hurry and the thread's start or end, one at a time)

    def begin(self) -> None:  # on the warm-up's thread, before its work
        from attnviz.engine.computing.qmatvec import warm_behind
        from attnviz.ui.machinery.tuning import below_the_main_thread

        with self._lock:
            self._thread = threading.get_native_id()
            if not self._hurried:
                below_the_main_thread()
                warm_behind()  # (a thread that needs the kernels takes the steps itself)

    def end(self) -> None:  # on the warm-up's thread, after its work (its id may be reused then)
        with self._lock:
            self._thread = None

    def hurry(self) -> None:
        """From now on at this thread's priority (a generation's, about to start: its steps take
        the layer loop until the warm-up is done): the warm-up's thread raised where the system
        lets it (an unprivileged user on Linux may not raise a thread again once lowered), and
        the steps it has not begun taken on a thread started here, at this thread's priority,
        while the warm-up's own thread begins none (qmatvec.warm_behind)."""
        from attnviz.ui.machinery.tuning import to_this_threads_priority

        with self._lock:
            if self._hurried or self._thread is None:  # (not begun: it begins at this priority)
                self._hurried = True
                return
            self._hurried = True
            to_this_threads_priority(self._thread)
        threading.Thread(target=self.work, name=f"attnviz-{WARM_KIND}-hurried", daemon=True).start()

    def __repr__(self):
        return f"WarmUp({self.model!r})"


def hurry_the_kernels_warm_up() -> None:
    """The kernels' own warm-up threads (a load's, or the one a keystroke's one-row run began
    where the window's had not: qmatvec.takes_layer), made far nicer than the thread that started
    them, raised to this thread's priority where the system lets it: the warm-up the window asks
    for meanwhile takes the steps they have not begun (they come behind it: qmatvec.warm_behind)
    and waits only for one under way there."""
    from attnviz.engine.computing.qmatvec import WARM_THREAD
    from attnviz.ui.machinery.tuning import to_this_threads_priority

    for t in threading.enumerate():
        if t.name.startswith(WARM_THREAD) and t.native_id is not None and t.is_alive():
            to_this_threads_priority(t.native_id)


def warm_the_rest(worker, model, steps: bool = False) -> None:
    """Compile (or load) what the quantised kernels of `model`'s packed layers still lack, their
    serial twins, the one-row steps and the one-row block for the scale types its layers run it
    with (engine/computing/qmatvec.py warm), then the model's stack of every layer's blocks
    (onerow_stack.prepare: the first keystroke would build it), on a thread of its own below the
    main thread (a job of `worker`, the app's runner); nothing where both are done or under way.
    A warm-up of another model (the window's model before) still under way is left to run on as
    it is, and this one started beside it (the steps they share are taken once).
    A keystroke meanwhile waits for neither (module docstring). `steps`: asked for by a
    generation about to start, whose steps take the layer loop until the warm-up is done (one
    run chooses once; each step is a run): then on a thread at the main thread's priority, as the
    generation's own, which would otherwise leave a thread below it no core on 2 cores until its
    last step; a warm-up under way (the first analysis's, or one the kernels began on a thread of
    their own: hurry_the_kernels_warm_up) is raised to it where the system lets it, and its steps
    not begun yet are taken at that priority (WarmUp.hurry), where it is `model`'s."""
    types = getattr(getattr(model, "unchecked_weights", None), "packed_types", None)
    if not types:
        return
    if steps:
        hurry_the_kernels_warm_up()
    job = worker.running(WARM_KIND)
    if job is not None and isinstance(job.request, WarmUp) and job.request.model is model:
        if steps:
            job.request.hurry()
        return
    from attnviz.engine.computing import onerow_stack, qmatvec
    from attnviz.engine.computing.layers import layer_for
    from attnviz.engine.computing.load import packed_views
    from attnviz.engine.errors import ModelFileChanged
    from attnviz.ui.machinery.runner import THREAD

    # (a process that warmed the kernels already, at a model before: the stack may still be to build)
    try:
        if qmatvec.warmed(types, layers=packed_views(model)) and onerow_stack.prepared(model.weights.layers):
            return
    except ModelFileChanged:  # (nothing more to warm for it: each run says its file changed)
        return

    def warm():
        qmatvec.warm(types, layers=packed_views(model))
        onerow_stack.prepare(model.weights.layers, model.config.n_layer, layer_for)
    warm_up = WarmUp(model, steps, warm)

    def work():
        warm_up.begin()
        try:
            warm()
        finally:
            warm_up.end()
    worker.submit(WARM_KIND, work, lambda *_: None, warm_up, THREAD)
