"""What one forward pass records and what it changes: the `Trace`, its edits, and the KV cache.

The forward pass (`families.forward`) stays one plain function. A caller says what it wants to see
by building a Trace (as TransformerLens's `run_with_cache` or an nnsight trace do); nothing else is
recorded, and the typing path asks for the patterns alone. Each layer's block gets that layer's slot
of the trace, a `LayerCache`, and calls it at a few named points, in the order data flows:

    input(x)       the attention input x [n, d_model] (after the input norm in a pre-LN model)
    kv(k, v)       the layer's new keys and values [n_kv_head, n, d_head] -> all T (cached prefix first)
    q(q, lse, c)   attention in row blocks (a long text, longdoc.block_attention): q [n_head, n, d_head]
                   (RoPE applied), each row's log-sum-exp [n_head, n] and the layer's Consts, what a
                   pattern is recomputed from; no pattern exists
    scores(s)      the scores [n_head, n, T] before the softmax: knockouts are applied here
    pattern(a)     the pattern [n_head, n, T]: recorded; the run stops here when nothing later is wanted
    z(z)           each head's output z [n_head, n, d_head] before W_O: recorded; ablations replace it
    mlp_out(m)     the MLP's output m [n, d_model] before it joins the residual (Gemma 3: before
                   its post-feedforward norm): recorded; patches replace rows of it

and the forward loop records the residual stream entering each block (and patches rows of it,
`at_resid`) and the final-norm input.

An intervention is an edit the trace applies at one of these points (engine/computing/edits.py:
`ReplaceHead` at `z`, `Knockout` at `scores`, `Patch` at `resid`, `z`, `pattern` or `mlp_out`):
the forward pass has no flag per experiment. A run can resume at layer l from an earlier trace of
the same ids (`Trace(start=l, base=clean)`, the clean trace having kept `resid`): the layers
before the first one an edit changes are reused (the new trace shares their records), as the KV
cache reuses a prefix of tokens.

After the run a Trace holds, per layer i (lists of n_layer; None where not asked):
    attentions [n_layer, n_head, T, T]   patterns (patterns=True)
    k[i], v[i]  [n_kv_head, T, d_head]   keys and values (kv=True, or values=True for v)
    inputs[i]   [T, d_model]             attention inputs (inputs=True)
    z[i]        [n_head, T, d_head]      head outputs before W_O, after any edit (z=True);
                                         head h's output into the residual is z[i][h] @ W_O[h]
    resid[i]    [T, d_model]             the residual stream entering block i (resid=True);
                resid[n_layer]           the final-norm input (what the unembedding reads)
    mlp_out[i]  [T, d_model]             the MLP's output, after any patch (mlp_out=True)
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, fields
from typing import Callable

import numpy as np

# the edits a Trace applies (importable from here, beside it)
from attnviz.engine.computing.edits import POINTS, Knockout, Patch, ReplaceHead, edited_z, patches_at  # noqa: F401


class Stop(Exception):
    """Raised at the point after which a trace wants nothing more (nnsight's early stop)."""


RECORDS = ("inputs", "z", "resid", "mlp_out")  # per-position records: rows of a cached prefix stay valid


class Trace:
    """Ask for what to record and which edits to apply; the forward pass fills the rest.

    patterns: the attention patterns (the default). values: every layer's V (value norms). kv: keys
    and values of all T tokens (a run that fills a KV cache). inputs, z, resid, mlp_out: see the
    module docstring. edits: ReplaceHead, Knockout and Patch. start, base: run layers start.. only, from base's
    resid[start] (`base`: an earlier trace of the same ids that kept resid); layers before `start`
    share base's records. end: run only the layers before it (what one layer's anatomy needs);
    the patterns are then [end, n_head, T, T] and no final-norm input is recorded."""

    # (q, k, v, consts, cache) -> z: how the trace's run attends when not densely (a long trace's
    # row blocks, longdoc.block_attention); None: families.dense_attention, with masks
    attention: Callable | None = None
    past: KVCache | None = None  # a cache the trace brings (run_long's reuse, a generation's), not the model's
    workers: int = 1  # threads a run's row-wise steps and blocks are shared over (a long trace's)
    # (k, fn): fn(trace) once layers 0..k-1 are done (their patterns final), before layer k starts:
    # a window shows one layer before the layers after it are computed (RunRequest(early=...))
    early: tuple | None = None
    # () -> bool, asked before each layer: True stops the run there with Cancelled (a window's
    # keystroke run that a newer keystroke has replaced); the model's KV cache keeps its last run
    stop: Callable[[], bool] | None = None
    # the steps a run of one row on packed layers takes: True, the compiled one-row steps
    # (engine/computing/onerow.py, their block, their stack); False, the layer loop's NumPy steps;
    # None: those loaded as the run first asks, chosen then for all its layers and kept here
    # (layers.one_row_steps). A run given another's choice takes the same steps (Compare's B on a
    # keystroke's ids: the same bits as A's once the one-row steps' warm-up ends, where B's cache
    # holds the keys A's does, so both compute the same new rows: analysing/pair.Follower)
    one_row: bool | None = None
    # how engine/computing/onerow_stack.py may run a cached one-row run of a trace of exactly this
    # class (read from the class's own body: a subclass that says nothing is never run so):
    # "patterns", each layer's row into `attentions`, the run ending at the last one
    one_call = "patterns"

    def __init__(self, *, patterns: bool = True, values: bool = False, kv: bool = False,
                 inputs: bool = False, z: bool = False, resid: bool = False,
                 mlp_out: bool = False, edits=(),
                 start: int = 0, base: Trace | None = None, end: int | None = None):
        if start and (base is None or not base.resid or base.resid[start] is None):
            raise ValueError("resuming at a layer needs a base trace that kept the residual stream")
        if end is not None and end <= start:
            raise ValueError(f"a run that ends before layer {end} must start before it, not at {start}")
        self.end = end
        self.want_patterns, self.want_values, self.want_kv = patterns, values, kv
        self.want = {"inputs": inputs, "z": z, "resid": resid, "mlp_out": mlp_out}
        self.edits = tuple(edits)
        self.start, self.base = start, (base if start else None)
        # filled by the forward pass
        self.ids: np.ndarray | None = None  # int64 [T]
        self.attentions: np.ndarray | None = None  # [n_layer, n_head, T, T]
        self.k: list = []
        self.v: list = []
        self.inputs: list = []
        self.z: list = []
        self.resid: list = []
        self.mlp_out: list = []
        self.reused = 0  # tokens whose rows came from the KV cache
        self.kv_bytes: int | None = None  # bytes of k's and v's arrays where the run counted them
        self.kv_held: int | None = None  # bytes of the arrays they are views of, where the run knows

    @property
    def wants_output(self) -> bool:
        """Whether anything after the last layer's patterns is wanted (its output, the final stream)."""
        return self.want["z"] or self.want["resid"] or self.want["mlp_out"]

    def begin(self, n_layer: int, ids: np.ndarray, p: int = 0) -> None:
        """Empty records for a run of `ids` [T] computing rows p..T-1 (the forward pass calls it)."""
        self.ids = ids
        self.reused = p
        self._p = p
        self.kv_bytes = self.kv_held = None
        if self.end is not None and self.end > n_layer:
            raise ValueError(f"a run of {n_layer} layers cannot end before layer {self.end}")
        self._last = self.n_run(n_layer) - 1
        for name in ("k", "v", "inputs", "z", "mlp_out"):
            setattr(self, name, [None] * n_layer)
        self.resid = [None] * (n_layer + 1)
        if self.start:  # the layers before `start` are the base's
            for name in ("k", "v", "inputs", "z", "resid", "mlp_out"):
                getattr(self, name)[:self.start] = getattr(self.base, name)[:self.start]

    def n_run(self, n_layer: int) -> int:
        """Layers the run goes through: all n_layer, or those before `end`."""
        return n_layer if self.end is None else self.end

    def slot(self, i: int, past: KVCache | None, rows: np.ndarray | None) -> LayerCache:
        """Layer i's slot: the cached prefix `past` (its first p tokens), `rows` the pattern rows
        p..T-1 to write into ([n_head, n, T]) or None."""
        return LayerCache(self, i, past, rows)

    def at_resid(self, i: int, x: np.ndarray) -> np.ndarray:
        """The residual entering block i [n, d_model] with the trace's resid patches of layer i."""
        patches = patches_at(self.edits, "resid", i)
        if patches:
            x = x.copy()
            for e in patches:
                x[e.rows] = e.value
        return x

    def record_resid(self, i: int, x: np.ndarray, past: KVCache | None) -> None:
        """The residual entering block i (i = n_layer: the final-norm input), rows p..T-1."""
        self.record_rows("resid", i, x, past)

    def record_rows(self, name: str, i: int, x: np.ndarray, past: KVCache | None) -> None:
        """Block i's rows p..T-1 of record `name` (RECORDS; z's rows on its axis 1), where asked:
        all T rows kept, the cached ones first."""
        if self.want[name]:
            cached = past.records[name][i] if self._p else None
            getattr(self, name)[i] = _rows(cached, x, self._p, 1 if name == "z" else 0)


def _rows(cached, new, p: int, axis: int):  # cached rows :p and new rows p: -> all T, contiguous
    if p and cached is not None:
        head = cached[(slice(None),) * axis + (slice(None, p),)]
        return np.concatenate([head, new], axis=axis)
    return np.ascontiguousarray(new)


KV_ROOM = 64  # positions a new K or V array of a cached run has room for after its own, at least
ROOM_SHARE = 4  # ... and a quarter of its own: a generation of T tokens copies its K and V O(log T) times


def kv_room(T: int) -> int:
    """Positions a new K or V array of T positions has room for after them: KV_ROOM, or T //
    ROOM_SHARE where that is more, so the copies a long generation makes grow rarer as T grows."""
    return max(KV_ROOM, T // ROOM_SHARE)


def append_positions(cached: np.ndarray, p: int, new: np.ndarray) -> np.ndarray:
    """A layer's cached keys (or values) :p, then `new` [n_kv_head, n, d_head] -> [n_kv_head, p + n,
    d_head]. Written in place after them when `cached` is exactly p positions at the start of an
    array with room for n more (a generation step copies nothing; no view already handed out
    reaches past p, so none changes); otherwise copied into a new array with room for kv_room(p +
    n) positions more (KV_ROOM for a run from scratch, p = 0: a long text the window holds keeps
    little room). The result is a view of that array: its nbytes count the p + n positions."""
    n = new.shape[1]
    base = cached.base
    if (cached.shape[1] == p and isinstance(base, np.ndarray) and base.ndim == 3
            and base.shape[0] == cached.shape[0] and base.shape[2] == cached.shape[2]
            and base.shape[1] >= p + n and base.strides == cached.strides
            and base.ctypes.data == cached.ctypes.data):
        base[:, p:p + n] = new
        return base[:, :p + n]
    room = kv_room(p + n) if p else KV_ROOM  # a run from scratch (a long text) keeps little room
    out = np.empty((new.shape[0], p + n + room, new.shape[2]), dtype=new.dtype)
    out[:, :p] = cached[:, :p]
    out[:, p:p + n] = new
    return out[:, :p + n]


def without_room(arrays: list) -> list:
    """Per layer K (or V) arrays of a run kept among the earlier ones, each copied out of an array
    with room for kv_room positions more (append_positions), which such a run rarely uses: a reused
    earlier run's next positions are then copied once, and its room is not held meanwhile. A
    layer's array of one holding every layer's keys and values of exactly its positions
    (onerow_stack's copy of them) is kept as it is."""
    return [a.copy() if isinstance(a.base, np.ndarray) and a.base.nbytes > a.nbytes
            and not _all_layers(a) else a for a in arrays]


def _all_layers(a: np.ndarray) -> bool:  # a: B[j, i] of a C-contiguous B [2, n_layer, n_kv_head, T, d_head]
    B = a.base
    return B.ndim == 5 and B.flags.c_contiguous and B.shape[2:] == a.shape and a.flags.c_contiguous


class LayerCache:
    """One layer's slot in a trace: the named points self_attention calls (module docstring)."""

    __slots__ = ("trace", "i", "past", "rows", "_p", "_stop_at")

    def __init__(self, trace: Trace, i: int, past: KVCache | None, rows):
        self.trace, self.i, self.past, self.rows = trace, i, past, rows
        self._p = trace._p
        last = i == trace._last
        after_z = trace.want["resid"] or trace.want["mlp_out"]  # wanted after the last z
        self._stop_at = (None if not last else "z" if not after_z and trace.want["z"]
                         else "pattern" if not trace.wants_output else None)

    def input(self, x):  # [n, d_model]
        self.trace.record_rows("inputs", self.i, x, self.past)

    def kv(self, k, v):  # [n_kv_head, n, d_head] x2 -> [n_kv_head, T, d_head] x2
        t = self.trace
        if self._p:  # cached keys and values first
            k = append_positions(self.past.k[self.i], self._p, k)
            v = append_positions(self.past.v[self.i], self._p, v)
        elif t.want_kv or t.want_values:  # copies of their own, never views holding the projection
            k, v = (np.array(k, order="C") if t.want_kv else k), np.array(v, order="C")
        if t.want_kv:
            t.k[self.i] = k
        if t.want_kv or t.want_values:
            t.v[self.i] = v
        return k, v

    def q(self, q, lse, c):  # [n_head, n, d_head], [n_head, n], Consts: kept by a long trace
        pass

    def scores(self, s):  # [n_head, n, T], in place
        for e in self.trace.edits:
            if isinstance(e, Knockout) and e.layer == self.i and e.q >= self._p:
                s[:, e.q - self._p, e.k] = -np.inf
        return s

    def pattern(self, a, row0: int = 0):  # [n_head, n, n_k], in place: rows row0..row0+n-1
        for e in patches_at(self.trace.edits, "pattern", self.i):
            inside = (e.rows >= row0) & (e.rows < row0 + a.shape[1])
            a[e.head, e.rows[inside] - row0] = e.value[inside]
        if self._stop_at == "pattern":
            raise Stop

    def z(self, z):  # [n_head, n, d_head] -> the same, edited
        z = edited_z(self.trace.edits, self.i, z)
        self.trace.record_rows("z", self.i, z, self.past)
        if self._stop_at == "z":
            raise Stop
        return z

    def mlp_out(self, m):  # [n, d_model] -> the same, patched
        patches = patches_at(self.trace.edits, "mlp_out", self.i)
        if patches:
            m = m.copy()
            for e in patches:
                m[e.rows] = e.value
        self.trace.record_rows("mlp_out", self.i, m, self.past)
        return m


class _Nothing:
    """The slot of a run that records nothing and edits nothing (anatomy, tests)."""

    rows = None

    def input(self, x):
        pass

    def q(self, q, lse, c):
        pass

    def kv(self, k, v):
        return k, v

    def scores(self, s):
        return s

    def pattern(self, a, row0=0):
        pass

    def z(self, z):
        return z

    def mlp_out(self, m):
        return m


NOTHING = _Nothing()


EARLIER_RUNS = 4  # earlier runs a KVCache keeps beside its current one (KVCache.earlier)
EARLIER_BYTES = 64 << 20  # ... as long as their arrays hold at most this many bytes together


@dataclass
class KVCache:
    """What one causal run leaves for the next: its ids, every layer's K (after RoPE) and V, its
    patterns, and the per-position records its trace kept (RECORDS: their rows stay valid for a
    prefix). Mutable: `families.forward` replaces the fields at the end of a run. Not locked here:
    its owner (a Model) lets one run at a time use it.

    Beside that current run it keeps a few earlier ones (`earlier`, newest first: EARLIER_RUNS at
    most, EARLIER_BYTES of arrays together), and a run starts from whichever shares the longest
    prefix with its ids (`reuse`), as a serving engine's prefix tree does. Typing needs it: a
    byte-level BPE re-splits the last word as it grows (" cab" + "i" -> " cabin" -> " cab" + "ine"),
    so the current run's prefix ends before the last token while a run two or three keys back
    holds it; a letter deleted and typed again finds its run whole. An earlier run whose ids are a
    prefix of the current one's is dropped (the current one holds all it could give)."""
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # int64 [T]
    k: list = field(default_factory=list)  # per layer [n_kv_head, T, d_head], not repeated
    v: list = field(default_factory=list)  # per layer [n_kv_head, T, d_head]
    records: dict = field(default_factory=dict)  # name in RECORDS -> per layer arrays of all T rows
    attentions: np.ndarray | None = None  # [n_layer, n_head, T, T], read-only: results share it
    nbytes: int = 0  # bytes of K and V held, from the arrays
    reused: int = 0  # tokens the last run took from the cache
    earlier: list = field(default_factory=list)  # KVCache of earlier runs, newest first (see above)
    held: int = -1  # an earlier run's bytes (held_bytes), counted once when first kept; -1: not yet
    # earlier runs `reuse` made current so far: it does so before a run's layers, so a run stopped
    # then leaves it done (pair.Follower compares the count of two caches that take the same runs)
    promoted: int = 0

    def prefix(self, ids: np.ndarray) -> int:  # [T] -> tokens in common with the cached ids
        n = min(len(ids), len(self.ids))
        a, b = self.ids[:n], ids[:n]
        if isinstance(b, np.ndarray) and a.dtype == b.dtype and a.dtype.kind in "iu" and a.tobytes() == b.tobytes():
            return n  # (all n alike: a generation's step, a keystroke that adds a token)
        same = a == b  # [n] bool
        return n if not n or same[k := int(same.argmin())] else k  # (argmin: the first False, or 0)

    def reuse(self, ids: np.ndarray, trace: Trace) -> int:
        """Tokens of `ids` [T] a kept run gives `trace` (0: none it may use): the current run's
        common prefix, or an earlier run's longer one, which then becomes the current run (the
        current one kept among the earlier)."""
        p = self.prefix(ids) if self.usable(trace) else 0
        best = None
        for j, run in enumerate(self.earlier):
            n = run.prefix(ids) if run.usable(trace) else 0
            if n > p:
                p, best = n, j
        if best is not None:
            run = self.earlier.pop(best)
            current = self._run()
            self._set(run)
            self._remember(current)
            self.promoted += 1
        return p

    def _run(self) -> KVCache:  # the current run alone, as an entry of `earlier`
        return KVCache(**{name: getattr(self, name) for name in _RUN_FIELDS})

    def _set(self, run: KVCache) -> None:  # make `run` the current one
        for name in _RUN_FIELDS:
            setattr(self, name, getattr(run, name))

    def earlier_kv(self) -> tuple[int, int]:
        """(earlier runs kept, the bytes of their K and V)."""
        earlier = list(self.earlier)  # (a snapshot: a run on another thread may replace the list)
        return len(earlier), sum(r.nbytes for r in earlier)

    def held_bytes(self) -> int:
        """Bytes of the current run's arrays: K, V, patterns and records (K and V as their T
        positions, not counting the room for kv_room more their arrays may have)."""
        arrays = [*self.k, *self.v, *(a for rows in self.records.values() for a in rows)]
        return (sum(a.nbytes for a in arrays if a is not None)
                + (self.attentions.nbytes if self.attentions is not None else 0))

    def _remember(self, run: KVCache | None) -> None:
        """Keep `run` (a former current run) among the earlier ones unless the current run holds
        its ids; drop those the current one now holds, then the oldest beyond the limits."""
        def covered(r):  # its ids a prefix of the current run's
            return len(r.ids) <= len(self.ids) and self.prefix(r.ids) == len(r.ids)

        kept = ([run] if run is not None and len(run.ids) and not covered(run) else [])
        kept += [r for r in self.earlier if not covered(r)]
        total, earlier = 0, []
        for r in kept[:EARLIER_RUNS]:
            if r.held < 0:  # an earlier run's arrays never change: counted once
                r.k, r.v = without_room(r.k), without_room(r.v)
                r.held = r.held_bytes()
            total += r.held
            if total > EARLIER_BYTES:
                break
            earlier.append(r)
        self.earlier = earlier  # one assignment: a reader on another thread sees the old list or this

    def usable(self, trace: Trace) -> bool:
        """Whether a run of `trace` may reuse this cache's rows: it holds a run that kept the
        patterns, if the trace wants them, and every record the trace asks for."""
        return (len(self.ids) > 0 and (self.attentions is not None or not trace.want_patterns)
                and self.has(trace))

    def has(self, trace: Trace) -> bool:
        """Whether the cached run kept every per-position record `trace` asks for."""
        want, records = trace.want, self.records
        for name in RECORDS:
            if want[name] and records.get(name) is None:
                return False
        return True

    def store(self, trace: Trace) -> None:
        """Keep `trace`'s ids, keys, values, patterns and records (it ran with kv=True)."""
        if trace.attentions is not None:  # a run without patterns (a generation step) keeps none
            trace.attentions.flags.writeable = False
        ids, n = trace.ids.copy(), len(self.ids)
        # the run before, unless the new ids hold its (a generation's step, a keystroke that adds a
        # token: the run reused all of it, reuse's prefix): _remember would drop it
        held = n <= len(ids) and (trace.reused == n or self.prefix(ids) == n)
        before = self._run() if n and not held else None
        self.ids, self.k, self.v, self.attentions = ids, trace.k, trace.v, trace.attentions
        self.records = {name: getattr(trace, name) for name in RECORDS if trace.want[name]}
        for rows in self.records.values():  # shared with the trace: read-only, like the patterns
            for a in rows:
                a.flags.writeable = False
        self.nbytes = (trace.kv_bytes if trace.kv_bytes is not None
                       else sum(map(_NBYTES, self.k)) + sum(map(_NBYTES, self.v)))
        self.reused = trace.reused
        if before is not None or self.earlier:  # (else none to keep or drop)
            self._remember(before)

    def give(self, trace: Trace, T: int) -> None:
        """Every row is known (same ids, or a prefix of them): cut the cache to T tokens and fill
        `trace` from it."""
        if T < len(self.ids):
            def cut(a, axis):  # a copy of its own: the whole run is kept among the earlier ones,
                # and append_positions may write after the cut's T positions in place
                return a[(slice(None),) * axis + (slice(None, T),)].copy()
            whole = self._run()
            self.ids = self.ids[:T].copy()
            self.k, self.v = [cut(a, 1) for a in self.k], [cut(a, 1) for a in self.v]
            if self.attentions is not None:
                self.attentions = np.ascontiguousarray(self.attentions[:, :, :T, :T])
                self.attentions.flags.writeable = False
            self.records = {name: [cut(a, 1 if name == "z" else 0) for a in rows]
                            for name, rows in self.records.items()}
            for rows in self.records.values():
                for a in rows:
                    a.flags.writeable = False
            self.nbytes = sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)
            self._remember(whole)
        self.reused = T
        trace.ids, trace.reused = self.ids, T
        trace.attentions = self.attentions.view() if self.attentions is not None else None
        trace.k, trace.v = list(self.k), list(self.v)
        for name in RECORDS:
            if trace.want[name]:
                setattr(trace, name, list(self.records[name]))


_NBYTES = operator.attrgetter("nbytes")

# what one run is: every field but the earlier runs and the count of an earlier run's bytes
_RUN_FIELDS = tuple(f.name for f in fields(KVCache) if f.name not in ("earlier", "held", "promoted"))
