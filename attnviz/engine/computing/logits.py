"""From the residual stream to next-token logits: a model's head (its final norm and the
unembedding W_U [vocab, d_model]) as an `LMHead`, which Model.lm_head builds once and keeps.

    logits = W_U · norm(x)   [vocab]   (x: the final-norm input [d_model])

A quantised unembedding (GGUF) is not dequantised whole when the head is built: a pass over the
vocabulary dequantises VOCAB_BLOCK rows, multiplies by them while they are in cache and lets them
go (`Unembedding`). A head used for more than HOLD_AFTER passes (the window, a long generation) keeps
the float32 rows from its next pass on, where the memory budget allows. Either way each block's
product is the same call on the same float32 values: the logits are the same bits.

A model whose layers are packed for the quantised kernels (the window: Weights.packed_types) packs
its quantised unembedding too, the first time the logits of a few rows are asked for (a generation
step, a comparison's keystroke; not when the head is built): those logits are then one product on
its blocks (engine/computing/qmatvec.py), equal to the float32 product within the kernels' bound,
and no float32 copy is made for them. More rows than that and fewer than ROWS_PASS (the window's
analysis: a row per layer) run on the kernels too: on the packed copy once it is made, and before
that a block of VOCAB_BLOCK rows packed at a time and let go (the first analysis does not wait
for the whole table to be packed). Each group of 16 table rows is the same product either way,
so the same bits; the float32 pass (dequantised blocks, then their product) would cost more.

A pass over a streamed table dequantises the next block on a thread of its own while this one
multiplies by the block before, into two arrays it reuses: the same values and the same product
call per block, so the same bits.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from attnviz.engine.errors import Cancelled, ModelLoadError, NoPrediction
from attnviz.engine.computing.families import FAMILY
from attnviz.engine.computing.layers import layer_norm, rms_norm
from attnviz.engine.parallel import cores
from attnviz.engine.reading.gguf_tensors import QuantRows
from attnviz.engine.reading.qpack import LANES


@dataclass(frozen=True)
class LMHead:
    """A model's final norm and its unembedding as float32, ready for logits."""
    norm: tuple  # (gain,) RMSNorm or (gain, bias) LayerNorm, [d_model] each
    centred: bool  # LayerNorm (subtracts the mean) or RMSNorm
    eps: float
    w_u: np.ndarray  # [vocab, d_model] float32, or the file's table (QuantRows) under a memory budget
    pack: PackedUnembedding | None = None  # w_u packed for the kernels when first asked (packed)

    @property
    def packed(self):
        """qpack.PackedMatrix of w_u (a few rows' logits on its blocks), packed on first use; None
        where the head has no kernel copy."""
        return None if self.pack is None else self.pack.get()

    def packed_for(self, n_rows: int):
        """The packed table where the kernels take a product of `n_rows` rows on it (qmatvec.takes),
        packed now if it is not yet; None otherwise, without packing it."""
        if self.pack is None or not self.pack.could_take(n_rows):
            return None
        pm = self.pack.get()
        return pm if pm is not None and _kernels().takes(pm, n_rows) else None

    def normed(self, x):  # [..., d_model] -> [..., d_model]
        return (layer_norm if self.centred else rms_norm)(x, *self.norm, self.eps)

    def logits(self, x):  # final-norm input [n, d_model] -> logits [n, vocab] (vocab_logits)
        return vocab_logits(self, x)


def build_head(model, pack: bool = True) -> LMHead:
    """The model's final norm and unembedding as an LMHead (GGUF's quantised output head stays in
    the file's type, an Unembedding: its rows are checked as a pass dequantises them; its copy
    packed for the kernels, where the model has one, is made when first asked). pack=False:
    no packed copy of the table for the kernels (a caller that streams the whole table).
    NoPrediction, in one line, for an encoder, a file missing its final norm or unembedding, or
    non-finite values in them."""
    cfg, h = model.config, model.weights.head
    if not cfg.causal:
        raise NoPrediction(f"{model.name} is an encoder, so it predicts no next token")
    if h is None or not FAMILY[cfg.family].pre_norm:
        raise NoPrediction(f"attnviz reads no final norm or unembedding for a {cfg.model_type} model, "
                           f"so {model.name} predicts no next token")
    if h.missing:
        raise NoPrediction(f"{model.name} predicts no next token because {h.missing}")
    if isinstance(h.unembed, np.ndarray):
        w_u = np.ascontiguousarray(np.asarray(h.unembed, dtype=np.float32))  # [vocab, d_model]
    else:  # kept in the file's type, dequantised VOCAB_BLOCK rows at a time as a pass needs them
        w_u = Unembedding(h.unembed, hold=_fits(model, h.unembed))
    if w_u.shape != (cfg.vocab_size, cfg.d_model):
        raise NoPrediction(f"{model.name} predicts no next token because its unembedding is "
                           f"{list(w_u.shape)}, expected [{cfg.vocab_size}, {cfg.d_model}]")
    for name, a in ((("unembedding", w_u),) if isinstance(w_u, np.ndarray) else ()) + tuple(
            ("final norm", g) for g in h.norm):
        if not np.isfinite(a).all():
            raise NoPrediction(f"{model.name} predicts no next token because its {name} holds "
                               "non-finite values (NaN or inf)")
    return LMHead(norm=tuple(np.asarray(g, dtype=np.float32) for g in h.norm),
                  centred=FAMILY[cfg.family].norm is layer_norm, eps=cfg.norm_eps, w_u=w_u,
                  pack=PackedUnembedding(h.unembed) if pack and _packs(model, h.unembed) else None)


def _packs(model, table) -> bool:
    """Whether the quantised unembedding gets a copy packed for the kernels: where the model's
    layers are packed (the process asked for the kernels) and its type has a kernel."""
    if not model.weights.packed_types or not isinstance(table, QuantRows):
        return False
    return _kernels().has_kernel(table.qtype)


_UNPACKED = object()  # PackedUnembedding before its table is packed


@dataclass(eq=False)
class PackedUnembedding:
    """A quantised unembedding's copy packed for the kernels (a qpack.PackedMatrix), made the
    first time it is asked for (get), its kernel warm then; None where a scale is not finite (the
    blocks' own check then names the row). Packing a 262,144-row table takes longer than a pass
    over it, so a pass of more rows than could_take's (the window's first analysis) packs a block
    at a time instead while the copy is not made (by_blocks)."""
    table: QuantRows
    _pm: object = field(default=_UNPACKED, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def could_take(self, n_rows: int) -> bool:
        """Whether a product of `n_rows` rows is few enough for the kernels (qmatvec.ROWS)."""
        return 0 < n_rows < _kernels().ROWS.get(self.table.qtype, 0)

    def by_blocks(self, n_rows: int) -> bool:
        """Whether a product of `n_rows` rows (more than could_take's) runs on the kernels, from
        the packed copy where it is made and otherwise a block packed at a time (_kernel_pass):
        fewer than qmatvec.ROWS_PASS, the kernels on (qmatvec.ENABLED), and no damaged scale found by
        get() (the float32 pass then names its row)."""
        return (not self.could_take(n_rows) and 0 < n_rows < _kernels().ROWS_PASS
                and bool(_kernels().ENABLED)
                and not (self.made and self._pm is None))

    @property
    def made(self) -> bool:
        """Whether get() has packed the table (or found it cannot be)."""
        return self._pm is not _UNPACKED

    @property
    def held(self):
        """The packed copy (qpack.PackedMatrix) where get() has made it, else None; packs nothing."""
        pm = self._pm
        return None if pm is _UNPACKED else pm

    def get(self):
        if self._pm is _UNPACKED:
            with self._lock:
                if self._pm is _UNPACKED:
                    self._pm = _packed_table(self.table)
        return self._pm


def _packed_table(table):
    from attnviz.engine.computing.qregroup import pack_rows
    from attnviz.engine.reading.qpack import PackedMatrix

    p = pack_rows(np.asarray(table.data).reshape(table.shape[0], -1), table.qtype)  # (a type _packs took)
    if not p.finite:
        return None
    _kernels().warm_few_rows([table.qtype])  # (the head needs its kernel alone)
    return PackedMatrix(((0, p),), p.n_out)


def _fits(model, unembed) -> bool:
    """Whether the unembedding may be held as float32: the model's memory budget holds every layer
    expanded and it besides (engine/reading/budget.py)."""
    if isinstance(unembed, np.ndarray):
        return True
    layers = model.weights.layers
    budget = getattr(layers, "budget", None)
    if budget is None:
        return True
    need = 4 * int(np.prod(unembed.shape, dtype=np.int64))
    return sum(layers.sizes) + need <= budget


def log_softmax(logits):  # [..., vocab] -> [..., vocab], float64
    """logits - logsumexp(logits), in float64, written into the one new array it returns: float32
    (or float16) logits are read as they are, each step converting them exactly (as a float64
    copy would, so the same bits), since every fresh array of a vocabulary's length costs the
    first touch of its pages (a generation step's logits are new each time)."""
    x = np.asarray(logits)
    if x.dtype.kind != "f" or x.dtype.itemsize > 8:
        x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True).astype(np.float64)  # (the max of the converted values)
    out = np.asarray(np.subtract(x, m, dtype=np.float64))  # (an array even for 0-d logits)
    np.exp(out, out=out)
    lse = m + np.log(out.sum(axis=-1, keepdims=True))
    return np.subtract(x, lse, out=out, dtype=np.float64)


VOCAB_BLOCK = 4096  # unembedding rows per block of `vocab_logits`
# passes over a quantised unembedding before its float32 rows are kept (Unembedding): writing the
# copy touches a table's worth of new memory, which costs several streamed passes
HOLD_AFTER = 8
FILL_PASSES = 5  # filling the kept copy costs about as much as this many streamed passes (benchmarks/cold_start)


class Unembedding:
    """A quantised unembedding [vocab, d_model] (the file's table, e.g. QuantRows) read as float32
    rows. Its blocks of VOCAB_BLOCK rows are dequantised when asked for and dropped after, so a
    one-shot command never holds (nor first touches the pages of) a float32 copy of the whole
    table; from the pass after HOLD_AFTER whole passes on, and only when `hold` (the memory budget
    allows it), each block is dequantised into a kept float32 table the first time it is asked for
    and read from it after. The rows are the table's either way (the same dequantiser), so a
    product by a block gives the same bits whichever way it came. Indexing other than a block
    (a token's row, a list of rows) reads the table (or the kept copy) directly."""

    def __init__(self, table, hold: bool):
        self.table, self.hold = table, hold
        self.shape = tuple(table.shape)
        self.dtype = np.dtype(np.float32)
        self._lock = threading.Lock()
        self._passes = 0  # whole passes made (a pass asks for the last block)
        self.hold_after = HOLD_AFTER  # whole passes streamed before the copy is kept
        self._kept: np.ndarray | None = None  # [vocab, d_model] float32, once holding
        self._filled = np.zeros(-(-self.shape[0] // VOCAB_BLOCK), bool)  # blocks written in _kept

    @property
    def kept(self) -> np.ndarray | None:
        """The float32 table [vocab, d_model] once it is kept (its blocks filled as passes reach
        them), else None."""
        return self._kept

    @property
    def rows_held(self) -> int:
        """Rows held as float32 now (0: every pass streams the file's blocks)."""
        if self._kept is None:
            return 0
        return int(sum(min(VOCAB_BLOCK, self.shape[0] - b * VOCAB_BLOCK) for b in np.flatnonzero(self._filled)))

    def expect_passes(self, n: int) -> None:
        """A caller about to make `n` more passes (a generation's steps): when that is more than
        FILL_PASSES, keep the copy from the next block on rather than stream each pass first."""
        if n > FILL_PASSES:
            self.hold_after = -1

    def block(self, v0: int, buf: np.ndarray | None = None) -> np.ndarray:
        """Rows v0..v0 + VOCAB_BLOCK - 1 (v0 a multiple of VOCAB_BLOCK) as float32 [block, d_model];
        `buf` (float32 [VOCAB_BLOCK, d_model]): where the block is dequantised, not kept, it is
        written there (the pass's reused array) rather than into a fresh one."""
        b = v0 // VOCAB_BLOCK
        kept = self._kept
        if kept is not None and self._filled[b]:
            return kept[v0:v0 + VOCAB_BLOCK]
        with self._lock:
            if v0 + VOCAB_BLOCK >= self.shape[0]:
                self._passes += 1
            if self._kept is None and self.hold and self._passes > self.hold_after:
                self._kept = np.empty(self.shape, np.float32)
            kept = self._kept
            if kept is not None and not self._filled[b]:
                kept[v0:v0 + VOCAB_BLOCK] = self.table[v0:v0 + VOCAB_BLOCK]
                self._filled[b] = True
        if kept is None:
            if buf is not None and isinstance(self.table, QuantRows):
                return self.table.rows_into(v0, buf[:min(VOCAB_BLOCK, self.shape[0] - v0)])
            return np.asarray(self.table[v0:v0 + VOCAB_BLOCK], dtype=np.float32)
        return kept[v0:v0 + VOCAB_BLOCK]

    def __getitem__(self, rows) -> np.ndarray:
        kept = self._kept
        if kept is not None and self._filled.all():
            return kept[rows]
        if isinstance(rows, slice) and rows.step in (None, 1):
            a, b, _ = rows.indices(self.shape[0])
            if a % VOCAB_BLOCK == 0 and (b - a == VOCAB_BLOCK or b == self.shape[0] and b - a <= VOCAB_BLOCK):
                return self.block(a)
        return np.asarray(self.table[rows], dtype=np.float32)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[:], dtype=dtype)


def vocab_logits(head: LMHead, x, stop: Callable[[], bool] | None = None) -> np.ndarray:
    """Final-norm inputs x [..., d_model] -> logits [..., vocab] float32, in blocks of VOCAB_BLOCK
    unembedding rows, whether w_u is float32 or kept in the file's type (an Unembedding: a block
    dequantised at a time): the same products either way, so how the table is held changes no
    logit, not even in the last bit (but where the head is packed for the kernels: the logits of
    fewer than ROWS_PASS rows come from its blocks, within the kernels' bound). `stop()` is asked
    before each block and raises Cancelled when it says so: a newer keystroke waits for one block,
    not for the whole unembedding. A non-finite row met in a quantised table: NoPrediction,
    naming it."""
    return vocab_logits_of(head, [x], stop)[0]


def vocab_logits_of(head: LMHead, xs, stop: Callable[[], bool] | None = None) -> list[np.ndarray]:
    """vocab_logits of each of `xs` in one pass over the unembedding: each block is read (or
    dequantised) once and multiplied by each x in turn, the same product as vocab_logits(head, x)
    makes, so each result is the same bits as its own pass would give."""
    xns = [head.normed(np.asarray(x, dtype=np.float32)).astype(np.float32, copy=False) for x in xs]
    V = head.w_u.shape[0]
    outs = [np.empty((*xn.shape[:-1], V), np.float32) for xn in xns]  # [..., vocab] each
    floats, kernel_rows = [], []  # (xn, out) of the float32 pass; (rows, out [n, vocab]) of the kernels'
    if head.pack is not None and stop is not None and stop():
        raise Cancelled("a newer request replaced this one")
    for xn, out in zip(xns, outs):
        rows = xn.reshape(-1, xn.shape[-1])  # [n, d_model]
        if head.pack is not None and head.pack.by_blocks(rows.shape[0]):
            kernel_rows.append((rows, out.reshape(-1, V)))
            continue
        packed = head.packed_for(rows.shape[0])  # a few rows: one product on the packed blocks
        if packed is not None:
            out[...] = _kernels().qlinear(rows, packed).reshape(out.shape)
        else:
            floats.append((xn, out))
    if kernel_rows:
        _kernel_pass(head.pack, kernel_rows, stop)
    if floats:
        _float32_pass(head.w_u, floats, stop)
    return outs


def _float32_pass(w_u, jobs, stop) -> None:
    """out[..., block] = xn @ block.T for each (xn, out) of `jobs`, a block of w_u at a time."""
    with _Blocks(w_u.shape[0], *_float32_reader(w_u)) as blocks:
        for v0 in range(0, w_u.shape[0], VOCAB_BLOCK):
            if stop is not None and stop():
                raise Cancelled("a newer request replaced this one")
            w = blocks.get(v0)  # [block, d_model]
            for xn, out in jobs:
                out[..., v0:v0 + VOCAB_BLOCK] = xn @ w.T  # [..., block]


def _kernel_pass(pack: PackedUnembedding, jobs, stop) -> None:
    """out = rows Wᵀ for each (rows [n, d_model], out [n, vocab]) of `jobs` on the kernels, a block
    at a time so that stop() is asked before each: the packed copy's groups where it is made, else
    a block of VOCAB_BLOCK rows packed (on a thread of its own while the caller multiplies by the
    block before) and let go. Each group of 16 rows is the same product either way (qmatvec), so
    the same bits."""
    qm = _kernels()
    qm.warm_few_rows([pack.table.qtype])  # (the regroup too; a kernel still loading is waited for)
    V = pack.table.shape[0]
    pm = pack.get() if pack.made else None  # (None too where a scale is not finite: the blocks name it)
    if pm is not None:
        step = max(LANES, VOCAB_BLOCK // LANES * LANES)  # (whole groups)
        read, ahead = partial(_groups_of, pm.parts[0][1], n=step), False
    else:
        step, read, ahead = VOCAB_BLOCK, partial(_packed_block, pack.table), cores() > 1
    with _Blocks(V, read, ahead) as blocks:
        for v0 in range(0, V, step):
            if stop is not None and stop():
                raise Cancelled("a newer request replaced this one")
            p = blocks.get(v0)  # rows v0.. packed (qpack.Packed)
            for rows, out in jobs:
                out[:, v0:v0 + p.n_out] = qm.qmatvec(p, rows)


def _groups_of(p, v0: int, n: int):
    """Rows v0..v0 + n - 1 of a packed table (v0, n multiples of 16): views of its groups."""
    g0, n = v0 // LANES, min(n, p.n_out - v0)
    sl = slice(g0, g0 + -(-n // LANES))
    return dataclasses.replace(p, n_out=n, q=p.q[sl], scale=p.scale[sl],
                               offset=None if p.offset is None else p.offset[sl])


def _packed_block(table: QuantRows, v0: int):
    """Rows v0..v0 + VOCAB_BLOCK - 1 of a quantised table packed for the kernels (qpack.Packed);
    a block whose scales are not all finite is dequantised instead, for its check to name the row
    (ModelLoadError)."""
    from attnviz.engine.computing.qregroup import pack_rows

    rows = np.asarray(table.data[v0:v0 + VOCAB_BLOCK]).reshape(-1, table.data.shape[-1])
    p = pack_rows(rows, table.qtype)
    if not p.finite:
        table.rows_into(v0, np.empty((len(rows), table.shape[1]), np.float32))
        raise AssertionError(f"rows {v0}.. have a non-finite scale but finite values")
    return p


def _float32_reader(w_u) -> tuple:
    """(read, ahead) for _Blocks over w_u: read(v0) its rows v0.. as float32 [block, d_model]; a
    streamed Unembedding dequantises each block into one of two arrays the pass reuses (the block
    after it is read only once the caller asks for the next, so its array is free again), read
    ahead where there is more than one core."""
    if not isinstance(w_u, Unembedding):
        return (lambda v0: np.asarray(w_u[v0:v0 + VOCAB_BLOCK])), False
    bufs = [np.empty((VOCAB_BLOCK, w_u.shape[1]), np.float32) for _ in range(2)]
    return (lambda v0: w_u.block(v0, bufs[(v0 // VOCAB_BLOCK) % 2])), cores() > 1


class _Blocks:
    """A pass's blocks in order (get(v0) for v0 = 0, VOCAB_BLOCK, ... below V, each read(v0)).
    Where `ahead`, block v0 + VOCAB_BLOCK is read on a thread of its own while the caller works
    on block v0. A ModelLoadError a read raises (a damaged row) is NoPrediction when the pass
    reaches its block. A with-block: the thread is joined when the pass ends, a Cancelled or an
    error included."""

    def __init__(self, V: int, read: Callable, ahead: bool):
        self.V, self._read = V, read
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="attnviz-unembed") if ahead else None
        self._next = None  # (v0, future) of the block being read ahead

    def get(self, v0: int):
        try:
            return self._get(v0)
        except ModelLoadError as exc:
            raise NoPrediction(f"the unembedding cannot be used for prediction: {exc}") from None

    def _get(self, v0: int):
        if self._pool is None:
            return self._read(v0)
        if self._next is not None and self._next[0] == v0:
            w = self._next[1].result()
        else:
            w = self._read(v0)
        nxt = v0 + VOCAB_BLOCK
        self._next = (nxt, self._pool.submit(self._read, nxt)) if nxt < self.V else None
        return w

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        return False


def _kernels():  # qmatvec, imported where a head is packed (numba is loaded then)
    from attnviz.engine.computing import qmatvec
    return qmatvec
