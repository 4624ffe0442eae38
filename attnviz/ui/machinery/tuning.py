"""The window process's tuning, in one place: BLAS capped at one thread for the runner's small
jobs (raised to every core for a run that gains from it), Python's garbage collection kept on the
main thread with what start-up made frozen out of its way (a failed job's tracebacks dropped, so
its frames go with it and not with a collection), and the pool's thread scheduled below the main
thread, which paints. benchmarks/typing_latency.py measures what each buys while typing."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable

from PySide6.QtCore import QCoreApplication, QTimer
from threadpoolctl import ThreadpoolController

from attnviz.engine.parallel import cores, limit_kernel_threads

BLAS_THREADS = 1


def limit_blas_threads(n: int = BLAS_THREADS) -> None:
    """Cap this process's BLAS thread pools, and the quantised kernels' threads, at `n`: each call
    sets both, so they agree on the latest call's n (a window assembled asks again: whatever set
    either meanwhile, the window's are these). The runner's jobs are small matrices (T up to a few
    hundred), where more BLAS threads cost more than they give, and on 2 cores their spinning takes
    the core the UI thread needs (the window stalls)."""
    # the quantised kernels' few-row products likewise, but a generation step's layers, which
    # take two threads (onerow_pair, one where the pair does not pay): a step runs on its own
    # thread and paints once a step, where a keystroke paints as it runs
    limit_kernel_threads(n, pair_steps=True)
    pools = ThreadpoolController()  # (found again: a BLAS loaded since is capped too)
    pools.limit(limits=n, user_api="blas")
    # Raise the cap here, on the main thread, and lower it again: with the OpenBLAS NumPy ships
    # (pthreads), unless the main thread has raised it once after lowering it, a raise made on
    # another thread (wide_blas in a pool job) is not taken and the job runs on one core
    # (tests/ui/test_typing_path.py checks the threads a pool job gets).
    with pools.limit(limits=cores(), user_api="blas"):
        pass


def wide_blas(on: bool = True):
    """A context in which BLAS uses every core (a long run: a pasted paragraph's [400, 576] x
    [576, 1536] products are big enough to gain from it, and the window waits for that run);
    otherwise nothing changes. Back to the cap after."""
    import contextlib

    if not on or cores() <= BLAS_THREADS:
        return contextlib.nullcontext()
    return _controller().limit(limits=cores(), user_api="blas")


def capped_blas():
    """A context in which BLAS is back at its cap (a long run met inside wide_blas: its rows
    are shared out to threads of one BLAS thread each). Back to what it was after."""
    import contextlib

    if cores() <= BLAS_THREADS:
        return contextlib.nullcontext()
    return _controller().limit(limits=BLAS_THREADS, user_api="blas")


_CONTROLLER: ThreadpoolController | None = None


def _controller() -> ThreadpoolController:
    """The process's thread pools, found once: threadpool_limits looks them up again at each call,
    on a keystroke's run."""
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


_GC_TIMER: QTimer | None = None
GC_INTERVAL_MS = 500


def collect_garbage_on_the_main_thread() -> QTimer:
    """Python's cyclic garbage collector runs in whichever thread happens to allocate. Run on a job
    thread, it can free a Qt object left in a reference cycle (a closed window's widgets), whose
    destructor takes a Qt lock and then waits for the GIL, while the main thread holds the GIL and
    waits for that lock: the window freezes for good (seen in the test suite: a model load thread
    in gc_collect_main -> QObject::~QObject, the main thread in QMetaObject::disconnect). So, as
    pyqtgraph's GarbageCollector does, automatic collection is switched off and a timer on the
    main thread collects each generation once it passes its usual threshold (nothing while a
    threshold of 0 pauses collection: _collect). Returns that timer (made once)."""
    global _GC_TIMER
    if _GC_TIMER is not None:
        return _GC_TIMER
    app = QCoreApplication.instance()
    assert app is not None, "the job runner needs the QApplication"
    _GC_TIMER = QTimer(app)
    _GC_TIMER.timeout.connect(_collect)
    _GC_TIMER.destroyed.connect(_gc_timer_gone)
    gc.disable()
    _GC_TIMER.start(GC_INTERVAL_MS)
    return _GC_TIMER


START_UP_S = 10.0  # the longest postpone_collections() keeps the timer from collecting
_quiet_until = 0.0  # time.monotonic() before which the timer does not collect (start-up)


def postpone_collections(seconds: float = START_UP_S) -> None:
    """The timer collects nothing until the start-up's own collection (freeze_start_up_objects), or
    for `seconds` at most where none comes (a model that does not load): with collection switched
    off, generation 0 holds every object start-up has made (the widgets, pyqtgraph's items), which
    a collection would walk on the main thread, holding the GIL, as the window is first shown, to
    free almost nothing; the start-up's collection walks them all once anyway."""
    global _quiet_until
    _quiet_until = time.monotonic() + seconds


def _collect() -> None:
    """On the main thread: generation g once its count passes its threshold. Nothing while the
    first threshold is 0, which pauses collection (gguf_vocab.collector_paused, a vocabulary's
    build): CPython reads 0 as "no automatic collection", not as "always past it"."""
    if _quiet_until and time.monotonic() < _quiet_until:
        return
    if paused():
        return
    counts, limits = gc.get_count(), gc.get_threshold()
    for g in range(3):
        if counts[g] <= limits[g]:
            break
        gc.collect(g)


def paused() -> bool:
    """Whether automatic collection is paused: a first threshold of 0 (gguf_vocab.collector_paused,
    a vocabulary's build)."""
    return gc.get_threshold()[0] == 0


def freeze_start_up_objects() -> None:
    """One full collection, then every object alive (the modules, the window's widgets and
    pyqtgraph's items: about 85,000) moves to the collector's permanent generation, which no
    collection walks, so a full collection on the main thread stays short while typing
    (benchmarks/typing_latency.py measures the stalls). Called once a window's start-up is done; a window
    that closes calls thaw_objects(), so its own reference cycles are collected after all."""
    global _quiet_until
    gc.collect()
    gc.freeze()
    _quiet_until = 0.0  # (the timer collects as usual from here)


FREEZE_WAIT_MS = 50  # start-up's collection after its last job, and again while something holds it back


class StartUpCollection(QTimer):
    """freeze_start_up_objects() as soon as start-up is done: FREEZE_WAIT_MS after arm() (start-up's
    last job done, its result painted meanwhile), and again every FREEZE_WAIT_MS while something
    is `busy()` (a keystroke's run, an analysis) or a load's collector pause holds it back
    (gguf_vocab's threshold 0: a vocabulary's build, whose young objects it would walk and freeze).
    Its full collection holds the GIL on the main thread for a good part of a second on a big
    model's window: made as start-up ends, it is over before the user types as a rule, not at a
    pause in typing, where the keystroke that ends the pause would wait for it. What is alive then
    is frozen with the rest and still freed by reference counting when let go (a load's reader, a
    model replaced later: tests/ui/test_start_up_collection.py). `typed` postpones the timer's
    collections until it comes (postpone_collections); collects once, never after cancel() (the
    window closed)."""

    def __init__(self, parent, typed, busy: Callable[[], bool]):
        super().__init__(parent)
        self.setSingleShot(True)
        self.setInterval(FREEZE_WAIT_MS)
        self._busy, self.armed, self.done = busy, False, False
        typed.connect(self._postpone)
        self.timeout.connect(self._due)

    def arm(self) -> None:
        if not self.done:
            self.armed = True
            self.start()

    def _postpone(self, *_) -> None:
        if self.armed and not self.done:
            postpone_collections()  # (the start-up heap is not frozen yet)

    def _due(self) -> None:
        if self._busy() or paused():
            self.start()
            return
        self.done = True
        freeze_start_up_objects()

    def cancel(self) -> None:  # the window is closing: its objects are not start-up's to freeze
        self.done = True
        self.stop()


def thaw_objects() -> None:
    """Objects frozen at start-up are collected again like any other (a window closed)."""
    gc.unfreeze()


def _gc_timer_gone(*_):  # the application is gone: Python collects on its own again
    global _GC_TIMER
    _GC_TIMER = None
    gc.enable()


_NICED = threading.local()
POOL_NICE = 5  # the pool's threads run this much nicer than the thread that imported this module


def _own_nice() -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        return None


_MAIN_NICE = _own_nice()  # (imported on the main thread, before any pool thread exists)


def below_the_main_thread() -> None:
    """Lower this pool thread's scheduling priority once (Linux: a thread's own nice value, +5),
    so the main thread, woken to paint a result while a run goes on, gets a core at once. On 2
    cores a decoder's run keeps both busy (BLAS on both); at equal priority the main thread waits
    for one (benchmarks/typing_latency.py measures the longest stall while typing)."""
    if getattr(_NICED, "done", False) or _MAIN_NICE is None:
        return
    _NICED.done = True
    try:  # (absolute: a pool thread started from another one inherits its value)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, _MAIN_NICE + POOL_NICE))
    except OSError:  # not allowed here: the order stays the OS's
        pass


def to_this_threads_priority(native_id: int) -> None:
    """Raise thread `native_id` (Linux: its nice value) to this thread's scheduling priority,
    where it runs below it (a pool thread below_the_main_thread lowered); one at or above it is
    left as it is. Where the system refuses (an unprivileged process may lower a thread's
    priority but raise it again only as far as RLIMIT_NICE lets it), it stays where it is."""
    own = _own_nice()
    try:
        if own is not None and os.getpriority(os.PRIO_PROCESS, native_id) > own:
            os.setpriority(os.PRIO_PROCESS, native_id, own)
    except OSError:
        pass


_TRIM = None  # glibc's malloc_trim, or False where the C library has none


def release_free_memory() -> None:
    """Hand the C allocator's free pages back to the system (glibc's malloc_trim; nothing with
    another C library). A comparison's transient arrays (blocks of both unembeddings, both runs'
    activations) are freed on the pool's threads, whose allocator arenas would otherwise keep them
    resident: two models' memory would grow by them keystroke by keystroke."""
    global _TRIM
    if _TRIM is None:
        import ctypes
        import ctypes.util

        try:
            _TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


def without_frames(exc: BaseException) -> BaseException:
    """`exc` and the exceptions it chains, their tracebacks dropped (already in the log where
    unexpected): a traceback holds the job's frames and their arrays (a stopped run's partial trace)
    in a reference cycle through this frame, freed only by a collection, which runs on the main
    thread (tuning.py) and would free them there, between two paints; dropped, they go with the job."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return exc
