"""GGUF's quantisation types applied to float32 matrices, with the `gguf` package's NumPy quantizers.

One rule serves both the in-memory quantized model (engine/computing/quantized.py) and the file
writer (engine/reading/gguf_write.py), so a model quantized in memory holds exactly the values
attnviz reads back from a file of that type:
- a 2-D weight matrix is quantized row by row ([out, in] as GGUF stores it: a row is one output's
  weights, cut into the type's blocks), the token embedding and the output head included;
- a matrix whose row length is not a whole number of the type's blocks is kept at F16;
- norms, biases and other 1-D tensors stay float32, and so do learned position and token-type
  embeddings (as llama.cpp's llama-quantize leaves them).

The work is cut into row blocks shared out to one thread per core, and each block into pieces
that stay in cache for gguf's quantizer: every 32-value block is quantized (and dequantized) on its
own, so the bytes and values equal gguf's quantize() on the whole matrix (tests/engine/
test_quantized.py)."""

from __future__ import annotations

import gguf.quants as gguf_quants
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quantize

from attnviz.engine.parallel import cores, in_threads
from attnviz.engine.errors import InputError
from attnviz.engine.reading.dequant import dequantize_into, prepare

# the types attnviz writes and quantizes to, best first
QUANT_TYPES = ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "F16", "BF16")
FALLBACK = GGMLQuantizationType.F16  # a matrix whose rows do not fit the type's blocks
# 2-D tensors that stay float32 (llama-quantize leaves position and token-type embeddings)
KEPT_F32_SUFFIXES = ("position_embeddings.weight", "token_type_embeddings.weight", "wpe.weight",
                     "position_embd.weight", "token_types.weight")
CHUNK_VALUES = 1 << 20  # values a thread quantizes at a time (4 MiB of float32)
PIECE_VALUES = 1 << 16  # values one call of gguf's quantizer takes (256 KiB: stays in cache)


def quant_type(name, allowed: tuple[str, ...] = QUANT_TYPES) -> GGMLQuantizationType:
    """'Q8_0' (any case) -> GGMLQuantizationType.Q8_0; InputError naming the `allowed` types
    otherwise."""
    key = str(name).strip().upper()
    if key not in allowed:
        raise InputError(f"cannot quantize to {str(name)!r}: the types are {', '.join(allowed)}")
    return GGMLQuantizationType[key]


def block_size(qtype: GGMLQuantizationType) -> int:
    return GGML_QUANT_SIZES[qtype][0]


def stored_type(qtype: GGMLQuantizationType, n_cols: int) -> GGMLQuantizationType:
    """The type a matrix with rows of `n_cols` values is stored at: `qtype`, or F16 when the rows
    are not a whole number of its blocks."""
    return qtype if n_cols % block_size(qtype) == 0 else FALLBACK


def is_quantized(name: str, shape) -> bool:
    """Whether tensor `name` of `shape` is a weight matrix that takes the type (2-D, not kept)."""
    return len(shape) == 2 and not name.endswith(KEPT_F32_SUFFIXES)


def _row_chunks(n_rows: int, n_cols: int) -> range:
    step = max(1, min(CHUNK_VALUES // max(1, n_cols), -(-n_rows // cores())))
    return range(0, n_rows, step)


def quantize_rows(w: np.ndarray, qtype: GGMLQuantizationType) -> tuple[np.ndarray, GGMLQuantizationType]:
    """w [rows, cols] float32 -> (its bytes as gguf stores them [rows, row bytes] (F16: float16
    [rows, cols]), the type used: `qtype` or F16, stored_type's rule)."""
    w = np.asarray(w)
    n_rows, n_cols = w.shape
    used = stored_type(qtype, n_cols)
    if used in (GGMLQuantizationType.F16, GGMLQuantizationType.F32):  # plain casts
        dtype = np.float16 if used == GGMLQuantizationType.F16 else np.float32
        return np.asarray(w, dtype=np.float32).astype(dtype), used
    block, size = GGML_QUANT_SIZES[used]
    out = np.empty((n_rows, n_cols // block * size), dtype=np.uint8)
    starts = _row_chunks(n_rows, n_cols)
    step = starts.step

    rows_of = _quantize_rows_of(used)
    piece = max(1, PIECE_VALUES // max(1, n_cols))

    def one(k):  # rows a..a+step-1 on whichever thread takes them, a cache-sized piece a call
        end = min(starts[k] + step, n_rows)
        for a in range(starts[k], end, piece):
            b = min(a + piece, end)
            out[a:b] = rows_of(np.ascontiguousarray(w[a:b], dtype=np.float32))

    in_threads(len(starts), one)
    return out, used


def _quantize_rows_of(qtype: GGMLQuantizationType):
    """gguf's quantizer for `qtype` on [rows, cols] -> [rows, row bytes]: its type's own
    quantize_rows where gguf has one (the blocks' formulas, without quantize()'s split into
    16-row groups, whose many small NumPy calls cost more than the arithmetic), else quantize()."""
    cls = getattr(gguf_quants, "_type_traits", {}).get(qtype)
    rows_of = getattr(cls, "quantize_rows", None)
    return rows_of if rows_of is not None else (lambda rows: quantize(rows, qtype))


def dequantize_rows(data: np.ndarray, qtype: GGMLQuantizationType, n_cols: int,
                    out: np.ndarray | None = None) -> np.ndarray:
    """quantize_rows' bytes [rows, row bytes] of `qtype` -> float32 [rows, n_cols] (into `out`, a
    C-contiguous float32 array, when given), the values gguf's dequantize gives."""
    n_rows = data.shape[0]
    if out is None:
        out = np.empty((n_rows, n_cols), dtype=np.float32)
    starts = _row_chunks(n_rows, n_cols)
    step = starts.step

    def one(k):
        a = starts[k]
        if not dequantize_into(data[a:a + step], qtype, out[a:a + step]):  # (F16: gguf's cast)
            out[a:a + step] = dequantize(data[a:a + step], qtype).reshape(-1, n_cols)

    prepare(qtype)  # (gguf's lookup grids made once, before the threads)
    in_threads(len(starts), one)
    return out


def round_trip(w: np.ndarray, qtype: GGMLQuantizationType) -> tuple[np.ndarray, GGMLQuantizationType]:
    """w [rows, cols] -> (float32 [rows, cols] as a file of `qtype` gives it back, the type used)."""
    data, used = quantize_rows(w, qtype)
    return dequantize_rows(data, used, w.shape[1]), used


def tensor_values(t, shape: tuple) -> np.ndarray:
    """A GGUF file's tensor (a gguf ReaderTensor) -> float32 of `shape` (NumPy order), dequantized."""
    n_rows = int(np.prod(shape[:-1], dtype=np.int64))
    data = np.asarray(t.data).reshape(n_rows, -1)  # [rows, row bytes] (F32, F16: [rows, cols])
    return dequantize_rows(data, t.tensor_type, shape[-1]).reshape(shape)
