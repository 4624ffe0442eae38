"""A GGUF file's tensors by name: dequantised to float32 on request (`gguf.quants` knows every
type), in parallel row blocks into a layer's arrays, or kept quantised as a table whose rows are
dequantised when indexed (`QuantRows`: SmolLM2's 49,152 x 576 embedding is 30 MB in Q4_1, 113 MB as
float32). llama.cpp's Q/K row permutation is undone here too (`unpermute_qk`), so the engine keeps
one RoPE (rotate-half).
"""

from __future__ import annotations

import mmap
import threading
from bisect import bisect_right
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.parallel import cores, in_threads
from attnviz.engine.reading.dequant import COLUMN_TYPES, columns_into, dequantize_into, prepare
from attnviz.engine.reading.dequant_row import ROW_TYPES, q8_0_row, row_into
from attnviz.engine.reading.validate import check_finite, check_shape


def release_pages(region: np.ndarray) -> None:
    """Unmap the pages of a memory-mapped file that `region` (a view of it) covers: they stay in
    the page cache and are read back if used again. What was read from them and is held in another
    form (a packed or quantized copy) would otherwise count twice in the process's memory."""
    m = region
    while m is not None and not isinstance(m, mmap.mmap):
        m = getattr(m, "base", None)
    if m is None or not hasattr(mmap, "MADV_DONTNEED") or region.nbytes == 0:
        return
    a = region.ctypes.data - np.frombuffer(m, np.uint8).ctypes.data  # offset in the mapping
    start = a - a % mmap.PAGESIZE
    m.madvise(mmap.MADV_DONTNEED, start, min(len(m), a + region.nbytes) - start)


def _q8_0_parts(data: np.ndarray) -> tuple | None:
    """A Q8_0 table's rows [rows, row bytes] as views of its blocks' q (int8 [rows, blocks, 32]) and
    d (float16 [rows, blocks, 1]), made once: a row is then one product (QuantRows._one); None
    where the bytes are not one C-contiguous array."""
    size = GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0][1]
    if data.ndim != 2 or not data.flags.c_contiguous or data.shape[1] % size:
        return None
    blocks = data.reshape(len(data), -1, size)
    return blocks[:, :, 2:].view(np.int8), blocks[:, :, :2].view(np.float16)


def tensor_table(reader: GGUFReader) -> dict:
    return {t.name: t for t in reader.tensors}


class QuantRows:
    """A [rows, cols] table kept in its GGUF encoding; indexing dequantises just those rows.
    `near_edge`: called after a read of rows within FOLIO_REACH bytes of the table's first or last
    byte (GGUFTensors.rows: its released neighbours in the file let go again)."""

    def __init__(self, name: str, data: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, int],
                 near_edge: Callable[[], None] | None = None):
        self.name, self._data, self._qtype, self.shape = name, data, qtype, shape
        self.dtype = np.dtype(np.float32)
        self._q8 = _q8_0_parts(data) if qtype == GGMLQuantizationType.Q8_0 else None
        self._near_edge = near_edge
        # rows at either end whose read may map pages beside the table (a large folio per fault)
        self._edge_rows = -(-FOLIO_REACH // max(1, data.nbytes // max(1, shape[0])))

    def _read(self, first: int, last: int) -> None:  # rows first..last were read: near_edge if at an end
        if self._near_edge is not None and (first < self._edge_rows
                                            or last >= self.shape[0] - self._edge_rows):
            self._near_edge()

    def __getitem__(self, rows) -> np.ndarray:
        if self._qtype in ROW_TYPES and isinstance(rows, np.ndarray) and rows.shape == (1,):
            return self._one(rows)  # (a generation step's or a keystroke's new token)
        src = np.asarray(self._data[rows]).reshape(-1, self._data.shape[-1])  # [n, row bytes]
        if self._near_edge is not None and len(src):
            picked = (np.arange(self.shape[0])[rows] if isinstance(rows, slice)
                      else np.asarray(rows) % self.shape[0])
            self._read(int(picked.min()), int(picked.max()))
        out = np.empty((src.shape[0], self.shape[1]), np.float32)
        # this module's dequantisers (gguf's values bit for bit); the whole table (an unembedding:
        # a layer's worth of weights) in row blocks on one thread per core, a text's rows on this one
        if len(src) * self.shape[1] <= COLUMN_BLOCK_VALUES:
            self._fill(src, out)
        else:
            step = max(1, min(FILL_VALUES // max(1, self.shape[1]), -(-len(src) // cores())))
            starts = range(0, len(src), step)
            prepare(self._qtype)
            in_threads(len(starts), lambda k: self._fill(src[starts[k]:starts[k] + step],
                                                         out[starts[k]:starts[k] + step]))
        out = out.reshape((*np.shape(rows), self.shape[1]) if not isinstance(rows, slice)
                          else (-1, self.shape[1]))
        # kept quantised, this table is not scanned at load (dequantising it all would be a large
        # share of the load): the rows a run uses are checked as they are dequantised
        self._check(out, lambda bad: np.arange(self.shape[0])[rows].reshape(-1)[bad])
        return out

    def _one(self, rows: np.ndarray) -> np.ndarray:
        """The one row `rows` [1] names of a Q8_0 or K-quant table [1, cols], checked: the
        dequantisers' values in a few array operations (dequant_row)."""
        row = int(rows[0])
        if not -self.shape[0] <= row < self.shape[0]:  # (as indexing refuses it: never another row)
            raise IndexError(f"index {row} is out of bounds for axis 0 with size {self.shape[0]}")
        row %= self.shape[0]
        if self._q8 is not None:  # Q8_0: dequant_row's product of the row's q [blocks, 32], d [blocks, 1]
            out = q8_0_row(self._q8[0][row], self._q8[1][row])
            if out is not None:  # (else a scale is not finite: refused below, by row)
                self._read(row, row)
                return out.reshape(1, self.shape[1])
        out = np.empty((1, self.shape[1]), np.float32)
        row_into(self._data[row], self._qtype, out)
        self._read(row, row)
        if not np.isfinite(out).all():  # (_check names the row)
            self._check(out, lambda bad: np.arange(self.shape[0])[rows][bad])
        return out

    def rows_into(self, a: int, out: np.ndarray) -> np.ndarray:
        """Rows a..a + len(out) - 1 dequantised into `out` (float32 [n, cols], C-contiguous) on
        this thread, and checked: the values and the check indexing gives (a pass over the
        vocabulary reuses one array for its blocks instead of a fresh one each). `out` returned."""
        self._fill(self._data[a:a + len(out)], out)
        self._read(a, a + len(out) - 1)
        self._check(out, lambda bad: a + bad)
        return out

    def _fill(self, src: np.ndarray, out: np.ndarray) -> None:
        """src's rows [n, row bytes] dequantised into out (float32 [n, cols], C-contiguous)."""
        if not dequantize_into(src, self._qtype, out):  # (F16)
            out[...] = np.asarray(dequantize(src, self._qtype), dtype=np.float32).reshape(out.shape)

    def _check(self, out: np.ndarray, row_of) -> None:
        """ModelLoadError naming the first row of `out` that holds a non-finite value (row_of:
        its index in `out` -> its row in the table)."""
        if not np.isfinite(out).all():
            bad = np.flatnonzero(~np.isfinite(out.reshape(-1, self.shape[1])).all(axis=1))[0]
            row = row_of(bad)
            raise ModelLoadError(f"tensor {self.name} row {int(row)} (token id {int(row)}) holds "
                                 "non-finite values, expected finite numbers: the file is damaged")

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[:], dtype=dtype)

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    @property
    def qtype(self) -> GGMLQuantizationType:  # the type its bytes are in
        return self._qtype

    @property
    def data(self) -> np.ndarray:  # its bytes [rows, row bytes] (F16: float16 [rows, cols])
        return self._data


REDO = "the file was written wrong; download or convert it again"


class GGUFTensors:
    """The tensors of a GGUF file by name, dequantised to float32 on request."""

    def __init__(self, reader: GGUFReader, path: Path):
        self.path = path
        held = getattr(reader, "mapped", None)  # (a stock GGUFReader holds none)
        self.files = (held,) if held is not None else ()  # what the tensors map: mapped_files.py
        self._table = tensor_table(reader)
        self._released: dict[str, tuple[int, ...]] = {}  # release()'s, for release_again (each name once)
        self._file = reader.data  # the whole file, mapped: byte k is the file's byte k
        # (start, end, name) of every tensor's bytes in file order, and their ends, for _release_near
        self._spans = sorted((int(t.data_offset), int(t.data_offset) + int(t.n_bytes), t.name)
                             for t in reader.tensors)
        self._ends = [end for _, end, _ in self._spans]
        self._bytes = {name: (start, end) for start, end, name in self._spans}

    def __contains__(self, name: str) -> bool:
        return name in self._table

    def names(self) -> list[str]:
        return list(self._table)

    def shape(self, name: str) -> tuple[int, ...]:  # NumPy order: [rows, cols] = [out, in]
        return tuple(int(n) for n in reversed(self._table[name].shape.tolist()))

    def check(self, name: str, shape: tuple[int, ...]):
        """Tensor `name`'s table entry, refused unless present, of `shape` and a float type."""
        t = self._table.get(name)
        if t is None:
            raise ModelLoadError(f"{self.path.name} has no tensor {name!r}")
        check_shape(name, self.shape(name), shape, "the file's metadata", self.path.name, REDO)
        if t.tensor_type in _INTEGER_TYPES:
            raise ModelLoadError(f"tensor {name} in {self.path.name} is stored as {t.tensor_type.name}, "
                                 "not a float type")
        return t

    def stored(self, name: str, shape: tuple[int, ...]):
        """Tensor `name`'s entry as get, fill and rows read it (type, data), checked as check()
        checks it. (A quantized copy of the file gives its tensors at another type here:
        engine/computing/quantized.py.)"""
        return self.check(name, shape)

    def release(self, name: str, shape: tuple[int, ...]) -> None:
        """Let go of the file's pages tensor `name` covers (release_pages), once it has been read
        into what is kept (a packed or expanded matrix), and again of its released neighbours'
        that reading it may have mapped back (_release_near)."""
        self._released[name] = shape  # (a W_O read again by each run is one entry, not one a run)
        self._release_near(name)

    def _release_near(self, name: str) -> None:
        """Release again the released tensors whose bytes lie within FOLIO_REACH of tensor `name`'s
        (just read): the kernel may map a file a large folio per fault, so a read after the load
        (a lazy layer, a run's W_O read alone) maps back its released neighbours' pages, and only
        theirs. One release_pages per run of them that no whole page of another tensor parts
        (those pages are let go with their neighbours anyway): a bisect and a few, per read."""
        start, end = self._bytes[name]
        lo, hi = start - FOLIO_REACH, end + FOLIO_REACH
        run = None  # [start, end] of released bytes not yet let go
        for i in range(bisect_right(self._ends, lo), len(self._spans)):
            a, b, other = self._spans[i]
            if a >= hi:
                break
            if other not in self._released:
                continue
            if run is not None and a - run[1] < mmap.PAGESIZE:
                run[1] = b
                continue
            if run is not None:
                release_pages(self._file[run[0]:run[1]])
            run = [a, b]
        if run is not None:
            release_pages(self._file[run[0]:run[1]])

    def release_again(self) -> None:
        """Release every tensor released so far once more, after the load has read them all: the
        kernel may map a file's pages a large folio per fault, so reading one tensor maps back the
        released pages of its neighbours."""
        for name, shape in list(self._released.items()):
            release_pages(np.asarray(self.stored(name, shape).data))

    def get(self, name: str, shape: tuple[int, ...], check: bool = True) -> np.ndarray:
        """Float32 tensor `name` [out, in], checked against the shape the metadata implies (and,
        `check`, its values finite)."""
        t = self.stored(name, shape)
        with _read_errors(name, t.tensor_type):
            out = dequantize(t.data, t.tensor_type)
        out = np.asarray(out, dtype=np.float32).reshape(shape)
        if out.ndim == 1 and np.may_share_memory(out, t.data):  # (an F32 vector, a norm's gain: a
            out = out.copy()  # view of the file, whose every read maps back its released neighbours)
        if self._released:  # (a vector read after the load: its read mapped back its neighbours)
            self._release_near(name)
        if check:
            check_finite(out, name, self.path.name)
        return out

    def fill(self, name: str, shape: tuple[int, int], out: np.ndarray, rows: np.ndarray | None = None,
             check: bool = True, columns: bool = False) -> np.ndarray:
        """Tensor `name` [out, in] (checked against `shape`) dequantised into `out` [out, in], a
        C-contiguous float32 array, in row blocks of at most FILL_VALUES values (the transient arrays
        stay small whatever the tensor's size) shared out to one thread per core (NumPy's passes
        release the GIL; benchmarks/dequant.py measures it). `rows`: out[r] =
        tensor[rows[r]] (a permutation). `columns`: `out` is [in, out] instead (C order, or columns
        of such an array): each row block is dequantised into a scratch block in cache and copied
        into its columns. Values as get() gives them, bit for bit (each value is dequantised from
        its own block alone; the blocks' split changes no value)."""
        t = self.stored(name, shape)
        data = np.asarray(t.data).reshape(shape[0], -1)  # [out, row bytes] (or [out, in] F32/F16)
        if columns and t.tensor_type in COLUMN_TYPES:
            return self._fill_columns(name, t.tensor_type, data, rows, out, check)
        step = max(1, min(FILL_VALUES // max(1, shape[1]), -(-shape[0] // cores())))
        if columns:  # a scratch block of rows that stays in cache
            step = min(step, max(1, COLUMN_BLOCK_VALUES // max(1, shape[1])))
        starts = range(0, shape[0], step)
        finite = [True] * len(starts)
        scratch = threading.local()

        def block(k):  # rows a..a+step-1, on whichever thread takes it
            a = starts[k]
            src = data[a:a + step] if rows is None else data[rows[a:a + step]]
            if columns:
                dst = getattr(scratch, "rows", None)
                if dst is None:
                    dst = scratch.rows = np.empty((step, shape[1]), np.float32)
                dst = dst[:len(src)]
            else:
                dst = out[a:a + step]
            if not dequantize_into(src, t.tensor_type, dst):  # (F32, F16)
                dst[...] = dequantize(src, t.tensor_type).reshape(-1, shape[1])
            if check:
                finite[k] = bool(np.isfinite(dst).all())
            if columns:
                np.copyto(out[:, a:a + len(src)], dst.T)
        with _read_errors(name, t.tensor_type):
            prepare(t.tensor_type)  # (gguf's lookup grids made once, before the threads)
            in_threads(len(starts), block)
        if check and not all(finite):  # named as the file stores it: count, first position
            rows_out = out.T if columns else out
            check_finite(rows_out if rows is None else rows_out[np.argsort(rows)], name, self.path.name)
        return out

    def _fill_columns(self, name: str, qtype, data: np.ndarray, rows, out: np.ndarray,
                      check: bool) -> np.ndarray:
        """fill's `columns` for the types dequant.columns_into writes: data [out, row bytes] (its
        rows taken in the order `rows` gives, if any) -> out [in, out], in bands of whole blocks of the input (about
        2 COLUMN_BLOCK_VALUES values each, at least one a core) shared out to one thread per core."""
        size, n_k = GGML_QUANT_SIZES[qtype][1], out.shape[0] // 32
        src = data if rows is None else data[rows]  # (bytes: a fraction of the floats')
        per = max(1, min(2 * COLUMN_BLOCK_VALUES // (32 * out.shape[1]), -(-n_k // cores())))
        starts = range(0, n_k, per)
        finite = [True] * len(starts)

        def band(k):  # input blocks a..a+per-1 of every row: out's rows 32 a.. (contiguous runs)
            a = starts[k]
            dst = out[32 * a:32 * (a + per)]
            columns_into(src[:, size * a:size * (a + per)], qtype, dst)
            if check:
                finite[k] = bool(np.isfinite(dst).all())
        with _read_errors(name, qtype):
            in_threads(len(starts), band)
        if check and not all(finite):  # named as the file stores it: count, first position
            check_finite(out.T if rows is None else out.T[np.argsort(rows)], name, self.path.name)
        return out

    def nbytes32(self, name: str) -> int:
        """Bytes of tensor `name` as float32 (0 when the file has none)."""
        t = self._table.get(name)
        return 0 if t is None else 4 * int(t.n_elements)

    def rows(self, name: str, shape: tuple[int, int]):
        """A [rows, cols] table kept quantised (F32 stays a memory-mapped view)."""
        t = self.stored(name, shape)
        if t.tensor_type == GGMLQuantizationType.F32:
            table = np.asarray(t.data).reshape(shape)
            check_finite(table, name, self.path.name)
            return table
        if t.tensor_type not in _DEQUANTISABLE:
            raise ModelLoadError(_not_dequantisable(name, t.tensor_type))
        return QuantRows(name, np.asarray(t.data), t.tensor_type, shape,
                         near_edge=lambda: self._released and self._release_near(name))

    def float32_bytes(self, skip: tuple[str, ...] = ()) -> int:
        return sum(4 * int(t.n_elements) for n, t in self._table.items() if n not in skip)


# the most a read of a mapped file maps beyond its bytes: a large folio (up to a PMD's 2 MiB) per
# fault, which need not start at a 2 MiB boundary of the file
FOLIO_REACH = 2 << 20
FILL_VALUES = 1 << 22  # values dequantised at a time into a layer's arrays (16 MiB as float32)
COLUMN_BLOCK_VALUES = 1 << 16  # ... into a scratch block first, for an [in, out] matrix (256 KiB)


def _dequantisable() -> set:
    import gguf.quants as q
    return set(q._type_traits) | {GGMLQuantizationType.F32, GGMLQuantizationType.F16}


_DEQUANTISABLE = _dequantisable()


def _not_dequantisable(name: str, qtype) -> str:
    return f"tensor {name} is stored as {qtype.name}, which the gguf package cannot dequantise"


@contextmanager
def _read_errors(name: str, qtype):
    """gguf's NotImplementedError (a type it has no dequantiser for) and ValueError (bytes it
    cannot read) inside, as a ModelLoadError that names tensor `name`."""
    try:
        yield
    except NotImplementedError:
        raise ModelLoadError(_not_dequantisable(name, qtype)) from None
    except ValueError as exc:
        raise ModelLoadError(f"tensor {name} ({qtype.name}) cannot be read: {exc}") from exc


_INTEGER_TYPES = {GGMLQuantizationType.I8, GGMLQuantizationType.I16, GGMLQuantizationType.I32,
                  GGMLQuantizationType.I64}


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:  # [n_head d_head, ...] -> same shape
    """Undo llama.cpp's `permute` of Q/K rows (its RoPE rotates adjacent pairs): back to the
    Hugging Face rotate-half layout. Within each head, llama.cpp stored rows (0, h, 1, h+1, ...)."""
    d_head = w.shape[0] // n_head
    return (w.reshape(n_head, d_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def unpermuted_rows(n_rows: int, n_head: int) -> np.ndarray:  # [n_rows] int64
    """The file row each row of unpermute_qk's result comes from: unpermute_qk(w) == w[rows]."""
    return unpermute_qk(np.arange(n_rows).reshape(n_rows, 1), n_head).reshape(-1)
