"""A GGUF tensor's quantised blocks laid out for the quantised kernels (engine/computing/qmatvec.py):
the same integers and scales, regrouped so one vector instruction decodes one input position of
16 output rows.

Every supported type reads as w = scale_s q + offset_s per sub-block s of S inputs (S = 32, or 16
for Q6_K), with q a small integer and scale, offset computed as gguf.quants computes them:

- nibbles (4 bits a weight): Q4_0 (q - 8 signed, offset 0), Q4_1 (d, m), Q4_K (d sc, -dmin mn).
  Byte j of a sub-block holds input j in its low and input j + 16 in its high nibble.
- bytes (int8 a weight): Q8_0 (q, offset 0), Q5_0 (q - 16, offset 0), Q5_1 (d, m),
  Q5_K (d sc, -dmin mn), Q6_K (q - 32, d sc, offset 0).

Layout (`Packed`), G = ceil(n_out / 16) groups of 16 output rows (the last padded with zeros):
- q uint8 [G, n_sub, B, 16]: B bytes a sub-block (16 nibble pairs or S bytes), row l of the group
  last, so 16 rows' bytes for one input are contiguous.
- scale, offset [G, n_sub, 16] (offset None where every offset is 0): float16 for the types whose
  blocks hold them as such (HALF: the file's own values, half the bytes; the kernels widen them
  exactly), float32 for the K-types (d sc and dmin mn are float32 products).

No file access: arrays in, arrays out.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf.quants import Q4_K as _Q4K

from attnviz.engine.reading.budget import arena_array
from attnviz.engine.reading.dequant import f16, halves  # (views of the blocks: read once, by the copy)

log = logging.getLogger(__name__)

LANES = 16  # output rows a group holds: one 512-bit vector of float32 (two 256-bit ones)
NIBBLES = (Q.Q4_0, Q.Q4_1, Q.Q4_K)
BYTES = (Q.Q8_0, Q.Q5_0, Q.Q5_1, Q.Q5_K, Q.Q6_K)
PACKED = NIBBLES + BYTES
HALF = (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1)  # scale and offset are the block's float16 d, m


@dataclass(frozen=True)
class Packed:
    """An [n_out, n_in] matrix in the kernels' layout (module docstring)."""
    qtype: Q  # the file's block type
    n_out: int
    n_in: int
    sub: int  # S: inputs a scale covers
    nibbles: bool  # two weights a byte (else one int8 a byte)
    signed: bool  # nibbles: q - 8 (Q4_0)
    q: np.ndarray  # uint8 [G, n_sub, B, 16]
    scale: np.ndarray  # float16 (HALF) or float32 [G, n_sub, 16]
    offset: np.ndarray | None  # as scale, None: all 0

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes + (0 if self.offset is None else self.offset.nbytes)

    @property
    def finite(self) -> bool:
        """Whether every weight is finite: w = scale q + offset with q a small integer is finite
        exactly where scale and offset are."""
        return bool(np.isfinite(self.scale).all() and (self.offset is None or np.isfinite(self.offset).all()))

    @cached_property
    def args(self) -> tuple:
        """(q, scale, offset) as the kernels take them: float16 as its uint16 bits (numba has no
        float16 on the CPU; the kernels widen them), no offset as an empty array of scale's type."""
        scale = self.scale
        offset = np.zeros((0, 0, LANES), scale.dtype) if self.offset is None else self.offset
        if scale.dtype == np.float16:
            scale, offset = scale.view(np.uint16), offset.view(np.uint16)
        return self.q, scale, offset


def _f32(b: np.ndarray) -> np.ndarray:  # uint8 [..., 2] (float16) -> float32 [...]
    return f16(b).astype(np.float32)


def _nibble_pairs(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # uint8 [...] -> low, high
    return b & np.uint8(15), b >> np.uint8(4)


def _five_bits(qs: np.ndarray, qh: np.ndarray, centred: bool) -> np.ndarray:
    """Q5_0's and Q5_1's weights: qs uint8 [..., 16] (low nibbles weights 0..15, high 16..31), qh
    uint8 [..., 4] (bit j of the little-endian uint32: weight j's fifth bit) -> int8 [..., 32],
    minus 16 where `centred` (Q5_0). Written in place in one array (a load packs every layer)."""
    q = np.empty(qs.shape[:-1] + (32,), np.uint8)
    np.bitwise_and(qs, np.uint8(15), out=q[..., :16])
    np.right_shift(qs, np.uint8(4), out=q[..., 16:])
    fifth = np.unpackbits(qh, axis=-1, bitorder="little")  # [..., 32] 0/1: bit j of the uint32
    fifth <<= np.uint8(4)
    q |= fifth
    q = q.view(np.int8)
    if centred:
        q -= np.int8(16)
    return q


def _decode(blocks: np.ndarray, qtype: Q):
    """uint8 [n_out, n_blk, size] -> q [n_out, n_sub, S] (uint8 0..15 for nibbles, else int8),
    for every packed type but Q4_0 and Q4_1 (_nibble_blocks),
    scale, offset [n_out, n_sub] (float16 for HALF, else float32; offset None: 0)."""
    n, nb = blocks.shape[:2]
    if qtype in (Q.Q5_0, Q.Q5_1):
        d, m, at = halves(blocks, qtype == Q.Q5_1)
        return _five_bits(blocks[..., at + 4:at + 20], blocks[..., at:at + 4], m is None), d, m
    if qtype == Q.Q8_0:
        return blocks[..., 2:34].view(np.int8), f16(blocks[..., 0:2]), None
    if qtype in (Q.Q4_K, Q.Q5_K):
        d, dmin = _f32(blocks[..., 0:2]), _f32(blocks[..., 2:4])
        sc, mn = _Q4K.get_scale_min(np.ascontiguousarray(blocks[..., 4:16]).reshape(-1, 12))
        scale = d[..., None] * sc.reshape(n, nb, 8).astype(np.float32)  # [n, nb, 8]
        offset = -(dmin[..., None] * mn.reshape(n, nb, 8).astype(np.float32))
        qs = blocks[..., 16:144] if qtype == Q.Q4_K else blocks[..., 48:176]
        lo, hi = _nibble_pairs(qs.reshape(n, nb, 4, 32))  # sub-blocks 2c (low), 2c + 1 (high)
        q = np.stack([lo, hi], axis=3).reshape(n, nb, 8, 32)
        if qtype == Q.Q5_K:
            qh = blocks[..., 16:48]  # bit j of qh[l]: sub-block j's fifth bit of its weight l
            q = q | (((qh[:, :, None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1) << 4)
            q = q.astype(np.int8)
        return q.reshape(n, nb * 8, 32), scale.reshape(n, -1), offset.reshape(n, -1)
    if qtype == Q.Q6_K:
        ql, qh = blocks[..., 0:128], blocks[..., 128:192]
        d = _f32(blocks[..., 208:210])
        scale = d[..., None] * blocks[..., 192:208].view(np.int8).astype(np.float32)  # [n, nb, 16]
        lo = ql.reshape(n, nb, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 1, 2, 1)
        lo = (lo & 15).reshape(n, nb, 2, 4, 32)
        hi = qh.reshape(n, nb, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 1, 4, 1)
        q = (lo | ((hi & 3) << 4)).astype(np.int8) - np.int8(32)
        return q.reshape(n, nb * 16, 16), scale.reshape(n, -1), None
    raise ValueError(f"no kernel layout for {getattr(qtype, 'name', qtype)}")


def _nibble_blocks(blocks: np.ndarray, qtype: Q):
    """Q4_0's and Q4_1's blocks uint8 [n_out, n_blk, size] -> their 16 nibble bytes [n_out, n_blk,
    16], d, m [n_out, n_blk] (float16; m None for Q4_0): byte j of a block already holds input j
    in its low and input j + 16 in its high nibble, the layout's order, so no nibble is split."""
    d, m, at = halves(blocks, qtype == Q.Q4_1)
    return blocks[..., at:at + 16], d, m


GROUP_BYTES = 1 << 20  # bytes of rows regrouped a copy: a whole table at once misses the caches


def _groups(a: np.ndarray, n_groups: int) -> np.ndarray:
    """[n_out, ...] -> [G, ..., 16]: rows padded to G * 16 with zeros, the row in its group last.
    Copied GROUP_BYTES of rows at a time (the same bytes as one copy of the whole)."""
    out = arena_array((n_groups,) + a.shape[1:] + (LANES,), a.dtype)  # (the load's buffer, if any)
    full = a.shape[0] // LANES  # groups of 16 whole rows
    src = a[:full * LANES].reshape((full, LANES) + a.shape[1:])
    step = max(1, GROUP_BYTES // max(1, LANES * a[:1].nbytes))
    for g in range(0, full, step):
        np.copyto(out[g:min(g + step, full)], np.moveaxis(src[g:g + step], 1, -1))
    if full < n_groups:  # the last group's missing rows are zeros
        tail = np.zeros((LANES,) + a.shape[1:], a.dtype)
        tail[:a.shape[0] - full * LANES] = a[full * LANES:]
        out[full] = np.moveaxis(tail, 0, -1)
        out[full + 1:] = 0
    return out


def pack(blocks: np.ndarray, qtype: Q) -> Packed:
    """`blocks` uint8 [n_out, row bytes] (a GGUF tensor's rows, one per output) -> Packed.
    ValueError for a type without a kernel layout or rows that are not whole blocks."""
    if qtype not in PACKED:
        raise ValueError(f"no kernel layout for {getattr(qtype, 'name', qtype)}")
    block, size = GGML_QUANT_SIZES[qtype]
    if blocks.dtype != np.uint8 or blocks.ndim != 2 or blocks.shape[1] % size:
        raise ValueError(f"{qtype.name} blocks {blocks.dtype} {blocks.shape} are not rows of "
                         f"{size}-byte blocks")
    n_out, n_in = blocks.shape[0], blocks.shape[1] // size * block
    if blocks.strides[1] != 1:  # (the float16 fields are read as views of each row's bytes)
        blocks = np.ascontiguousarray(blocks)
    nibbles = qtype in NIBBLES
    if qtype in (Q.Q4_0, Q.Q4_1):  # the file's bytes are the layout's: taken as they are
        q, scale, offset = _nibble_blocks(blocks.reshape(n_out, -1, size), qtype)
    else:
        q, scale, offset = _decode(blocks.reshape(n_out, -1, size), qtype)
        if nibbles:  # byte j: input j low, input j + 16 high
            q = q[..., :16] | (q[..., 16:] << np.uint8(4))
    n_groups = -(-n_out // LANES)
    return Packed(qtype, n_out, n_in, q.shape[-1] * (2 if nibbles else 1), nibbles, qtype == Q.Q4_0,
                  _groups(q.view(np.uint8), n_groups), _groups(scale, n_groups),
                  None if offset is None else _groups(offset, n_groups))


def dequantized(p: Packed) -> np.ndarray:
    """The float32 [n_out, n_in] values a Packed holds (tests check it against gguf.quants)."""
    q = np.moveaxis(p.q, -1, 1).reshape(-1, *p.q.shape[1:3])[:p.n_out]  # [n_out, n_sub, B]
    if p.nibbles:
        lo, hi = _nibble_pairs(q)
        q = np.concatenate([lo, hi], axis=-1).astype(np.float32) - (8 if p.signed else 0)
    else:
        q = q.view(np.int8).astype(np.float32)
    rows = lambda a: np.moveaxis(a, -1, 1).reshape(-1, a.shape[1])[:p.n_out]  # noqa: E731
    w = rows(p.scale).astype(np.float32)[..., None] * q
    if p.offset is not None:
        w += rows(p.offset).astype(np.float32)[..., None]
    return w.reshape(p.n_out, p.n_in)


@dataclass(frozen=True)
class PackedMatrix:
    """A layer matrix [n_out, n_in] (the engine multiplies by its [n_in, n_out] transpose) as
    packed parts: parts[k] = (at, Packed) gives outputs at..at + Packed.n_out (a fused Q | K | V or
    gate | up whose tensors have different block types has one part each)."""
    parts: tuple
    n_out: int

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for _, p in self.parts)

    @property
    def qtypes(self) -> set:
        return {p.qtype for _, p in self.parts}

    @property
    def finite(self) -> bool:
        """Whether every weight is finite (each part's Packed.finite)."""
        return all(p.finite for _, p in self.parts)


@dataclass(frozen=True)
class PackedLayer:
    """A layer's matrices packed for the kernels, named as layout.Layer's (None: kept float32 only)."""
    w_qkv: PackedMatrix | None
    w_o: PackedMatrix | None
    w_in: PackedMatrix | None
    w_out: PackedMatrix | None

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in (self.w_qkv, self.w_o, self.w_in, self.w_out) if m is not None)

    @cached_property
    def qtypes(self) -> frozenset:  # its matrices' block types (asked once a layer a run)
        return frozenset(q for m in (self.w_qkv, self.w_o, self.w_in, self.w_out) if m is not None
                         for q in m.qtypes)


def packed_nbytes(qtype: Q, n_out: int, n_in: int) -> int:
    """Bytes pack() gives an [n_out, n_in] `qtype` matrix (0 for a type it does not pack)."""
    if qtype not in PACKED:
        return 0
    rows = -(-n_out // LANES) * LANES
    sub = 16 if qtype == Q.Q6_K else 32
    per_scale = (2 if qtype in HALF else 4) * (2 if qtype in (Q.Q4_1, Q.Q4_K, Q.Q5_1, Q.Q5_K) else 1)
    return rows * (n_in // 2 if qtype in NIBBLES else n_in) + rows * (n_in // sub) * per_scale


_asked = False  # see ask_for_kernels
_rest_later = False  # see ask_for_kernels


def ask_for_kernels(on: bool = True, rest_later: bool = False) -> None:
    """Pack GGUF layers for the quantised kernels in this process from now on. A long-lived
    process asks (the window: every keystroke gains); a one-shot command does not, since loading
    numba and its cached kernels costs more than one run's few-row products save, except
    `generate` on a large file (commands/checks.py load_for_generation: every step's logits).
    `rest_later`: a load warms only the kernels a run of a few rows takes, not their serial
    twins nor the one-row steps; the process warms those itself once it has time (the window:
    after its first result is painted). Until then a one-row run does not wait for them: it takes the
    layer loop's steps on the few-row kernels (qmatvec.takes_layer)."""
    global _asked, _rest_later
    _asked = bool(on)
    _rest_later = bool(on and rest_later)


def rest_later() -> bool:
    """Whether a load leaves the kernels' serial twins and the one-row steps to a later warm-up
    (ask_for_kernels)."""
    return _rest_later


def kernels_on() -> bool:
    """Whether this process asked for the kernels and they can run here (numba importable):
    packing is pointless otherwise."""
    return _asked and importlib.util.find_spec("numba") is not None


def pack_parts(parts) -> PackedMatrix | None:
    """[(qtype, rows uint8 [n, row bytes], at)] (a layer matrix's tensors, outputs at..at + n) ->
    PackedMatrix, neighbours of one type packed together; None (the float32 path) when a type
    has no kernel layout, said once a type in the log."""
    out, n_out, run = [], 0, []
    for qtype, rows, at in parts:
        if qtype not in PACKED:
            if qtype not in said_once:
                said_once.add(qtype)
                log.info("no quantised kernel for %s: its matrices keep the float32 path",
                         getattr(qtype, "name", qtype))
            return None
        if run and (run[0][0] != qtype or run[-1][2] + run[-1][1].shape[0] != at):
            out.append(_packed_run(run))
            run = []
        run.append((qtype, rows, at))
        n_out = max(n_out, at + rows.shape[0])
    if run:
        out.append(_packed_run(run))
    return PackedMatrix(tuple(out), n_out)


def _packed_run(run) -> tuple:
    rows = run[0][1] if len(run) == 1 else np.concatenate([r for _, r, _ in run])
    return run[0][2], pack(rows, run[0][0])


said_once: set = set()  # block types already named in the log as without a kernel
