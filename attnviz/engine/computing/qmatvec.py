"""y = x Wᵀ straight from a GGUF tensor's quantised integers: the few-rows products of a keystroke or
a generation step read 4-8-bit weights instead of float32 copies.

W [n_out, n_in] comes packed (engine/reading/qpack.py: groups of 16 output rows, one vector lane a
row; per sub-block s of S inputs, w = scale_s q + offset_s). x is float32 [m, n_in] with m small;
y float32 [m, n_out]:

    y[i, r] = sum_s scale_s[r] (sum_{j in s} q[r, j] x[i, j]) + offset_s[r] (sum_{j in s} x[i, j])

The inner sum is float32 fused multiply-adds over 16 rows at once, written as LLVM vector code
(engine/computing/qdot.py, the kernels themselves too: 16-lane loads of the integers, decoded,
multiplied by one broadcast x, every sub-block of a group summed in registers), so the compiler cannot pick a worse
vectorisation (left to itself, LLVM vectorised the loop over inputs and summed lanes across);
where the CPU has AVX512-VNNI, the inner sums are integer dot products of the weights with x
split into int8 pieces, within the same tolerance (qdot.py's docstring; the byte types': qbytes.py),
and the 4-bit types' the same integers where it has AVX2 without AVX-512 (qmadd.py);
the groups of rows are split over parallel.kernel_threads() (numba's prange: every core; in the
window one as BLAS, and every core but one for a large matrix). Each group is summed by one
thread, so y is the same bits on any number of threads, and equals dequantise-then-float32-matmul
to float32 rounding (tests/engine/test_qmatvec.py).

Compiler: numba (binary wheels, so the README's pip install needs no C compiler; `cache=True`:
compiled once, loaded from its cache at later starts; `warm` runs them while a model loads). Its
vector code comes from LLVM for the machine it runs on (AVX-512, AVX2 or NEON alike). Without
numba, `has_kernel` says no and the engine keeps its float32 path. No Qt, no file access: arrays
in, arrays out.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from attnviz.engine.parallel import kernel_threads
from attnviz.engine.reading.qpack import HALF, LANES, NIBBLES, PACKED, Packed, PackedMatrix, pack, rest_later

log = logging.getLogger(__name__)

try:
    import numba

    from attnviz.engine.computing.qbytes import VNNI
    from attnviz.engine.computing.qbytes import k_b16 as _k_b16
    from attnviz.engine.computing.qbytes import k_b32 as _k_b32
    from attnviz.engine.computing.qmadd import SERIAL
    from attnviz.engine.computing.qmadd import k_nib as _k_nib
    from attnviz.engine.computing.qmadd import k_nib8 as _k_nib8
except ImportError:  # the float32 path is always there; has_kernel() then says no
    numba, VNNI = None, False

# the fewest rows of x at which linear() takes the float32 product again, per type: below the
# crossover benchmarks/qmatvec.py --threads 1 finds, with a margin (a kernel's work grows with the
# rows, BLAS's much less)
ROWS = {Q.Q4_0: 8, Q.Q4_1: 8, Q.Q4_K: 8, Q.Q8_0: 8, Q.Q5_0: 8, Q.Q5_1: 8, Q.Q5_K: 8, Q.Q6_K: 8}
# the same where the layer's float32 copy is not held: the float32 product would first expand the
# layer (dequantise every weight), which costs more than the kernels' rows up to about this many
# (benchmarks/qsteps.py, "run of n rows"): fewer where the kernels have no VNNI (AVX2's integer
# sums take three instructions a weight pair where VNNI's take one)
ROWS_UNEXPANDED = 256 if VNNI else 128
# the fewest rows whose logits a head packed for the kernels takes from the float32 pass again
# (logits.py): the kernels' work grows with the rows, a dequantised block's product much less;
# fewer without VNNI, where a row costs the kernels about twice as much (benchmarks/unembed_rows.py)
ROWS_PASS = 64 if VNNI else 40

KERNELS = PACKED
_lock = threading.Lock()  # one kernel at a time: numba's fallback thread pool is not re-entrant
# the thread count this thread last gave numba (asking numba costs more than a kernel's setup)
_set = threading.local()


ENABLED = True  # False: linear() keeps the float32 path (benchmarks time both in one process)
ONE_ROW = None  # engine/computing/onerow.py once warm() has loaded it (layers.one_row_steps)
WARM_THREAD = "qmatvec-warm"  # the name (prefix) of the threads that warm the kernels in the background


def takes(pm: PackedMatrix, n_rows: int) -> bool:
    """Whether linear() multiplies `n_rows` rows by the packed matrix here: kernels on and warm,
    either form (a kernel still compiling is never waited for on a keystroke; a call in the other
    form loads it, the same bits), and fewer rows than every part's type's crossover (ROWS)."""
    return (ENABLED and numba is not None and 0 < n_rows < min(ROWS[p.qtype] for _, p in pm.parts)
            and all(_few_rows_ready(p.qtype) for _, p in pm.parts))


def takes_layer(layer, n_rows: int, expanded: bool) -> bool:
    """Whether linear() multiplies `n_rows` rows by every packed matrix of `layer` (a packed view:
    layout.Layer with `packed`, a qpack.PackedLayer) on its blocks: fewer rows than ROWS where the
    layer's float32 copy is held (`expanded`), than
    ROWS_UNEXPANDED where it is not. A kernel not warm yet is waited for here where the layer is
    not expanded (loading it from numba's cache takes a fraction of a second, expanding a model
    longer, and its float32 copy would then be held). For one row, the serial twins and the
    one-row steps too, expanded or not (warm's extras; the one-row block for this layer's scale
    type alone, if it covers the layer), so every one-row run takes the same steps whenever a
    warm-up finished; but not in a process that warms those later itself (qpack.rest_later: the
    window, after its first analysis), whose one-row runs wait for no more than a run of a few
    rows: until the one-row steps are loaded they take the layer loop's NumPy steps on the
    few-row kernels (ONE_ROW is None; a run chooses once, for all its layers, and a run given
    another's choice takes the same: Trace.one_row), within the kernels' bound of the float32
    pass as the one-row steps are, and the first such run starts their warm-up on a thread of
    its own (_warm_later: a window whose first analysis never came, a Compare's B of other
    types). A run of more rows waits for its kernels alone: a serial twin gives its kernel's
    bits, and the one-row steps are not taken."""
    pl = layer.packed
    mats = [m for m in (pl.w_qkv, pl.w_o, pl.w_in, pl.w_out) if m is not None]
    if not (ENABLED and numba is not None and mats and n_rows > 0):
        return False
    if n_rows == 1 and not _one_row_ready(layer):
        if rest_later():
            _warm_later(pl.qtypes, layer)
        else:
            warm(pl.qtypes, layers=[layer])
    if not expanded:
        if n_rows >= ROWS_UNEXPANDED:
            return False
        if not all(_few_rows_ready(q) for q in pl.qtypes if has_kernel(q)):
            warm_few_rows(pl.qtypes)  # (more rows: the kernels alone, whichever thread's twin)
        return True
    return all(takes(m, n_rows) for m in mats)


def _one_row_ready(layer) -> bool:
    """Whether a one-row run of `layer` (a packed view) finds all warm: its block types' kernels,
    their serial twins and the one-row steps, and the one-row block for the scale type it runs the
    block with, where the block covers it (an earlier model of the same types that the block did
    not cover warmed none: onerow_block.block_scale)."""
    if not layer.packed.qtypes <= _ready_types:
        return False
    if ("one-row block", True) in _warmed and ("one-row block", False) in _warmed:
        return True  # (both scale types': no need to ask which)
    scale = ONE_ROW.onerow_block.block_scale(layer) if ONE_ROW is not None else None
    return scale is None or ("one-row block", scale == np.uint16) in _warmed


def qlinear(x: np.ndarray, pm: PackedMatrix) -> np.ndarray:
    """x [n, n_in] -> x Wᵀ [n, n_out] from the packed parts."""
    if len(pm.parts) == 1 and pm.parts[0][1].n_out == pm.n_out:
        return qmatvec(pm.parts[0][1], x)
    y = np.empty((x.shape[0], pm.n_out), np.float32)
    for at, p in pm.parts:
        y[:, at:at + p.n_out] = qmatvec(p, x)
    return y


def has_kernel(qtype) -> bool:
    """Whether qmatvec computes on `qtype`'s blocks (numba installed and a kernel for the type)."""
    return numba is not None and qtype in KERNELS


def _kernel_of(p: Packed):
    if p.nibbles:
        return _k_nib8 if p.signed else _k_nib
    return _k_b32 if p.sub == 32 else _k_b16


def _kernel_for(qtype):  # the kernel pack(.., qtype)'s matrices run on
    if qtype in NIBBLES:
        return _k_nib8 if qtype == Q.Q4_0 else _k_nib
    return _k_b16 if qtype == Q.Q6_K else _k_b32


def _key(qtype):  # a kernel compiled for qtype's scales: float16 bits (HALF) or float32
    return _kernel_for(qtype), qtype in HALF


def qmatvec(p: Packed, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """y [m, n_out] = x [m, n_in] @ Wᵀ, W the packed matrix (a vector x gives a vector).
    `out`: a C-contiguous float32 [m, n_out] to write y into."""
    if numba is None:
        raise ValueError("the quantised kernels need numba")
    x = np.ascontiguousarray(x, dtype=np.float32)
    one = x.ndim == 1
    x2 = x.reshape(1, -1) if one else x
    m = x2.shape[0]
    if x2.ndim != 2 or x2.shape[1] != p.n_in:
        raise ValueError(f"x {x.shape} does not match a {p.qtype.name} matrix of {p.n_in} inputs")
    n_groups = p.q.shape[0]
    padded = n_groups * LANES != p.n_out
    direct = out is not None and not padded and out.flags.c_contiguous and out.dtype == np.float32
    y = out if direct else np.empty((m, n_groups * LANES), np.float32)
    threads = min(kernel_threads(p.n_out * p.n_in), numba.config.NUMBA_NUM_THREADS)
    kernel = _kernel_of(p)
    with _lock:
        if threads == 1 and (kernel, p.qtype in HALF) in _serial_ready:
            kernel = SERIAL[kernel]
        elif getattr(_set, "threads", None) != threads:  # (numba's count is per calling thread)
            numba.set_num_threads(threads)
            _set.threads = threads
        kernel(*p.args, x2, y)
    if padded:
        y = y[:, :p.n_out]
    if out is not None and not direct:
        out[...] = y
        y = out
    return y[0] if one and out is None else y


def _hold_at_exit() -> None:
    """At interpreter exit: wait for the warm-up steps (compiles) and the kernel call in flight and
    let no other start. A daemon thread still inside LLVM or numba's thread pool while the process
    tears them down aborts it (an LLVM assertion or a segfault after the window has closed)."""
    global _closing
    with _stepping:
        _closing = True
        while _under_way:
            _stepping.wait()
    _lock.acquire()  # never released: the process is ending


atexit.register(_hold_at_exit)
_warmed: dict = {}  # _key -> seconds its first call took (compile, or load from numba's cache)
_serial_ready: set = set()  # the _keys whose serial twin is warm (warm(extras=True))
_ready_types: set = set()  # the block types whose kernel, serial twin and the one-row steps are warm
# (the one-row block is warm per scale type: _warmed["one-row block", h], _one_row_ready)

# The warm-up in steps (_take): a step is one compile (or load), taken by whichever thread comes to
# it first; a thread that comes to a step under way on another takes the steps after it first,
# then waits for it. A step under way is never overtaken: numba compiles one function at a time
# in a process, and a kernel's step compiles under _lock (a thread calling another kernel waits for
# it). A thread behind the others (warm_behind: niced below them) begins no step while another's
# warm-up is under way (_callers).
_stepping = threading.Condition()  # (over _under_way, _callers, _closing)
_under_way: dict = {}  # a step's name -> the Event its thread sets once it ends
_callers = 0  # warm-ups under way on threads not behind the others
_closing = False  # (the interpreter exits: no step begins)
_behind = threading.local()


def warm_behind() -> None:
    """This thread's warm-ups from now on come behind every other thread's (a thread run nicer than
    the threads that wait for it: where the system refuses to raise it again, as Linux does for an
    unprivileged user, a waiting thread would otherwise wait for it): it begins no step while a
    warm-up on another thread is under way, which takes the steps not begun itself, at its own
    priority, and waits for the one under way here."""
    _behind.yes = True


class _Calling:  # a warm-up under way on a thread not behind: threads behind take no step meanwhile
    def __enter__(self):
        global _callers
        self.counted = not getattr(_behind, "yes", False)
        if self.counted:
            with _stepping:
                _callers += 1

    def __exit__(self, *_):
        global _callers
        if self.counted:
            with _stepping:
                _callers -= 1
                _stepping.notify_all()


def _take(steps) -> None:
    """Each of `steps` ((name, done, do): done() whether it is done, do() does it) taken here in
    order where it is neither done nor under way on another thread; then those that were under way
    waited for (and taken here after all where one ended undone: an error on its thread)."""
    while steps:
        others = []
        for name, done, do in steps:
            if done():  # (no lock once warm)
                continue
            with _stepping:
                while _closing or (_callers and getattr(_behind, "yes", False)):
                    _stepping.wait()
                if done():
                    continue
                if name in _under_way:
                    others.append(((name, done, do), _under_way[name]))
                    continue
                ended = _under_way[name] = threading.Event()
            try:
                do()
            finally:
                with _stepping:
                    del _under_way[name]
                    _stepping.notify_all()
                ended.set()
        for _, ended in others:
            ended.wait()
        steps = [step for step, _ in others]


def _timed(name, fn, *args) -> None:  # fn(*args), its seconds kept as _warmed[name]
    t0 = time.perf_counter()
    fn(*args)
    _warmed[name] = time.perf_counter() - t0


def _kernel_steps(qtype, kernel: bool = True, serial: bool = True) -> list:
    """qtype's steps (_take): its kernel, its serial twin, the regroup a pass over a Q8_0
    unembedding takes (logits.py)."""
    key, steps = _key(qtype), []
    if kernel:
        steps.append((key, lambda: key in _warmed, lambda: _timed(key, _call_once, key[0], qtype)))
    if serial:
        steps.append((("serial", key), lambda: key in _serial_ready,
                      lambda: (_call_once(SERIAL[key[0]], qtype), _serial_ready.add(key))))
    if qtype == Q.Q8_0:
        from attnviz.engine.computing import qregroup
        steps.append(("regroup", lambda: "regroup" in _warmed, lambda: _timed("regroup", qregroup.warm)))
    return steps


def warm(qtypes=KERNELS, extras: bool = True, layers=None) -> dict:
    """Compile (or load from numba's on-disk cache) the kernels of `qtypes` with a tiny call each;
    {qtype name: seconds}. Safe from any thread; a kernel already warm costs nothing. `extras`:
    then their serial twins and the one-row steps too (a one-row run on packed layers waits for
    them, except in a process that warms them later: takes_layer), and the one-row block and stack
    for the scale types block_scales(layers) names: `layers`, a model's layers as a one-row run
    sees them (its packed views; None: every scale type of `qtypes`). One compile at a time is a
    step (_take): a step under way on another thread is waited for (at that thread's priority: a
    compile under way cannot be overtaken), never done twice, and the steps nobody has begun are
    taken here, at this thread's priority; a thread behind the others (warm_behind) begins none
    while this runs. On a cold cache two steps are large: onerow's import (_warm_one_row) and a
    kernel's compile. Once this returns with extras, ONE_ROW is set."""
    with _Calling():
        if extras:
            _begun(qtypes)
        kinds = [q for q in qtypes if has_kernel(q)]
        _take([step for q in kinds for step in _kernel_steps(q, serial=extras)])
        took = {q.name: _warmed[_key(q)] for q in kinds}
        if took and extras:
            scales = block_scales(layers) if layers is not None else {_scale(q) for q in kinds}
            half = {s == np.uint16 for s in scales}
            _begun((), half)
            if "one-row steps" not in _warmed or not all(("one-row block", h) in _warmed for h in half):
                _warm_one_row(half)
            _ready_types.update(kinds)
        return took


def block_scales(layers) -> frozenset:
    """The scale types (np.dtype: uint16, the float16 bits of qpack.HALF's blocks; float32, the K
    types') the one-row block runs some layer of `layers` with (a model's layers as a one-row run
    sees them: its packed views, layers.layer_for): those warm compiles the block and the stack
    for. A layer the block does not cover (one whose matrices mix float16 and float32 scales, or
    with biases or a family's other norms: onerow_block.block_scale) names none: it never runs the
    block, and compiling one for it would only lengthen the load."""
    layers = list(layers)
    if numba is None or not layers:
        return frozenset()
    from attnviz.engine.computing import onerow_block
    return frozenset(s for s in map(onerow_block.block_scale, layers) if s is not None)


def _scale(qtype) -> np.dtype:  # the dtype of a packed matrix's scales in qtype's blocks
    return np.dtype(np.uint16 if qtype in HALF else np.float32)


def _call_once(kernel, qtype) -> None:  # one call on a tiny matrix of `qtype`: compiled or loaded
    block, size = GGML_QUANT_SIZES[qtype]
    x, y = np.zeros((1, block), np.float32), np.empty((1, LANES), np.float32)
    with _lock:
        kernel(*pack(np.zeros((1, size), np.uint8), qtype).args, x, y)


def _warm_one_row(half) -> None:
    """Load the one-row steps (engine/computing/onerow.py: its import compiles their signatures,
    or loads them from numba's cache, the largest step on a cold cache) and call each once, and
    the block's calls for the scale types of `half` (True: float16 bits, qpack.HALF; False:
    float32), those alone (a model's layers use one or two), a step each (_take), the import
    first; the forward pass takes them from then on (ONE_ROW, set inside the steps' own step, so
    whichever thread sees that step done finds it set)."""
    _take([("one-row import", lambda: "one-row import" in _warmed, lambda: _timed("one-row import", _import_one_row))]
          + [(("one-row block", h), lambda h=h: ("one-row block", h) in _warmed,
              lambda h=h: _timed(("one-row block", h), _one_row, [np.uint16 if h else np.float32]))
             for h in sorted(half)]
          + [("one-row steps", lambda: "one-row steps" in _warmed, lambda: _timed("one-row steps", _one_row, ()))])


def _import_one_row() -> None:  # onerow imported: its steps' signatures compiled (or loaded)
    from attnviz.engine.computing import onerow  # noqa: F401


def _one_row(scales) -> None:
    """onerow.warm(scales), the module imported here (its steps compiled or loaded); with no
    scales (the one-row steps' own step), ONE_ROW set to it before the step is recorded done."""
    global ONE_ROW
    from attnviz.engine.computing import onerow
    onerow.warm(scales)
    if not scales:
        ONE_ROW = onerow


_started: set = set()  # the block types whose one-row warm-up has begun (warm with extras), and
# ("one-row block", h) for the scale types whose one-row block's has
_started_lock = threading.Lock()


def _warm_later(qtypes, layer) -> None:
    """warm(qtypes) on a thread of its own (warm_in_background): `layer`'s one-row steps and the
    one-row block for every scale type of its block types (not only `layer`'s: the layers met later
    find them ready), where no warm-up of its block types, or of the block for their scale types,
    has begun (a model of the same types that the block did not cover warmed none): a one-row run
    that does not wait for them starts it where nothing else has (the window's warm-up comes after
    a first analysis, for its model alone)."""
    if _begun(qtypes, {q in HALF for q in qtypes if has_kernel(q)}):
        warm_in_background(qtypes)


def _begun(qtypes, half=()) -> bool:
    """Whether this call is the first to begin warming some of qtypes' extras, or the one-row
    block for some scale type of `half` (True: float16 bits; False: float32)."""
    with _started_lock:
        new = ({q for q in qtypes if has_kernel(q)} | {("one-row block", h) for h in half}) - _started
        _started.update(new)
    return bool(new)


def warm_few_rows(qtypes) -> None:
    """The kernels of `qtypes` in the form a run of a few rows calls them here: their serial twins
    where every call runs on one thread (kernel_threads: the window's cap on 2 cores, generate's),
    else the kernels (warm without extras). A call on more threads than that loads its kernel then
    (the same bits)."""
    if numba is None:
        return
    if min(kernel_threads(1 << 62), numba.config.NUMBA_NUM_THREADS) > 1:
        warm(qtypes, extras=False)
        return
    with _Calling():
        _take([step for q in qtypes if has_kernel(q) for step in _kernel_steps(q, kernel=False)])


def _few_rows_ready(qtype) -> bool:  # whether a kernel of `qtype` is warm, either form
    return _key(qtype) in _warmed or _key(qtype) in _serial_ready


def warmed(qtypes, layers=None) -> bool:
    """Whether warm(qtypes) has run to the end: the kernels of `qtypes`, their serial twins and
    the one-row steps are compiled (or loaded); given `layers`, the one-row block too for the
    scale types block_scales(layers) names."""
    if not ({q for q in qtypes if has_kernel(q)} <= _ready_types and "one-row steps" in _warmed):
        return False
    return layers is None or all(("one-row block", s == np.uint16) in _warmed for s in block_scales(layers))


def warm_in_background(qtypes, extras: bool = True, layers=None, then=None) -> threading.Thread | None:
    """warm(qtypes, layers=layers) on a daemon thread (at model load), so no keystroke waits for a
    compile (`layers` may be an iterator: read on that thread); `extras` False:
    warm_few_rows(qtypes) instead. `then()`, if given, after it on that thread."""
    if numba is None:
        return None
    t = threading.Thread(target=_warm_nicely, args=(tuple(qtypes), extras, layers, then), name=WARM_THREAD,
                         daemon=True)
    t.start()
    return t


def _warm_nicely(qtypes, extras: bool = True, layers=None, then=None) -> None:
    """warm(), this thread first made nicer (Linux) and behind the others (warm_behind): a model's
    first run, on another thread, comes before the kernels it does not need yet, and a thread that
    needs them takes those not begun itself (and waits for the one under way here)."""
    warm_behind()
    try:
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + 10))
    except (AttributeError, OSError):  # (no per-thread priority here)
        pass
    if extras:
        warm(qtypes, layers=layers)
    else:
        warm_few_rows(qtypes)
    if then is not None:
        then()
