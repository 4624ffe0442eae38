"""A quantised table's rows regrouped for the kernels (engine/reading/qpack.py's layout) in compiled
code: qpack.pack's NumPy copies move one byte at a time through strided views, which costs more
than the kernels' own product where a pass packs an unembedding a block at a time
(engine/computing/logits.py). The same arrays as qpack.pack, byte for byte
(tests/engine/test_unembedding_pass.py); Q8_0 (the tied token embeddings of Gemma 3 and
SmolLM2 files) here, any other type by qpack.pack. No Qt, no file access: bytes in, arrays out.
"""

from __future__ import annotations

import threading

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from attnviz.engine.reading.qpack import LANES, Packed, pack

try:
    from numba import njit

    from attnviz.engine.computing import kernel_cache
except ImportError:  # qpack.pack alone then
    njit = None
else:
    kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

Q8_0_SIZE = GGML_QUANT_SIZES[Q.Q8_0][1]  # bytes a block: float16 d, 32 int8 q

if njit:

    @njit(cache=True, nogil=True)
    def _q8_0(blocks, q, scale):
        """blocks uint8 [n, n_sub, 34] -> q uint8 [G, n_sub, 32, 16] and scale uint8 [G, n_sub,
        16, 2] (d's two bytes), row r in lane r % 16 of group r // 16; lanes past n zeros."""
        n, n_sub = blocks.shape[0], blocks.shape[1]
        for g in range(q.shape[0]):
            for lane in range(LANES):
                r = g * LANES + lane
                for s in range(n_sub):
                    for b in range(2):
                        scale[g, s, lane, b] = blocks[r, s, b] if r < n else 0
                    for j in range(32):
                        q[g, s, j, lane] = blocks[r, s, 2 + j] if r < n else 0


def pack_rows(rows: np.ndarray, qtype) -> Packed:
    """qpack.pack(rows, qtype), the same arrays: `rows` uint8 [n_out, row bytes] of `qtype`
    blocks; Q8_0 regrouped by compiled code, any other type (or no numba) by qpack.pack."""
    if njit is None or qtype != Q.Q8_0 or rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] % Q8_0_SIZE:
        return pack(rows, qtype)
    n, n_sub = rows.shape[0], rows.shape[1] // Q8_0_SIZE
    groups = -(-n // LANES)
    q = np.empty((groups, n_sub, 32, LANES), np.uint8)
    scale = np.empty((groups, n_sub, LANES, 2), np.uint8)
    _q8_0(np.ascontiguousarray(rows).reshape(n, n_sub, Q8_0_SIZE), q, scale)
    return Packed(Q.Q8_0, n, n_sub * 32, 32, False, False, q, scale.view(np.float16)[..., 0], None)


_warm_lock = threading.Lock()
_warm = False


def warm() -> None:
    """Compile (or load from numba's cache) the regroup with a tiny call; safe from any thread."""
    global _warm
    if njit is None or _warm:
        return
    with _warm_lock:
        if not _warm:
            pack_rows(np.zeros((1, Q8_0_SIZE), np.uint8), Q.Q8_0)
            _warm = True
