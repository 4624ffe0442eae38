"""The nibble kernels (Q4_0, Q4_1, Q4_K) as qmatvec.py and the one-row block call them: where the CPU
has AVX2 but not AVX-512 (qdot.MADD), their inner sums in integers with vpmaddubsw; elsewhere
qdot's (float32, or VNNI), named here too; with qbytes' byte kernels, SERIAL: each kernel's
serial twin.

The float32 kernels spend about half an instruction a weight on decoding and converting bytes
(their loop is bound by that, not by the stream of q); vpmaddubsw multiplies 32 unsigned bytes
by 32 signed ones and sums adjacent pairs into int16, about a quarter of an instruction a weight
here. x is split as on VNNI (qx.pieces_x: PIECES = 3 balanced base-256 int8 digits p_ij of
N_j = round(x_j / u) per sub-block, u a power of 2), and t_s combined as there:

    S_i = sum_j q_j p_ij (exact),   t_s = u (256 (256 S_0 + S_1) + S_2)

so the outputs are the VNNI kernels' bits (their integer sums are the same integers; qdot's
docstring gives the error). A 32-byte load at an even byte j holds bytes j and j + 1 of the
group's 16 rows (qpack: byte j holds input j low, j + 16 high); its low and high nibbles,
interleaved within each 128-bit half, are (input j, input j + 16) pairs of rows 0-7 (and 8-15)
for byte j in the low half, j + 1 in the high half; vpmaddubsw against x's pair of digits
(p_ij, p_i,j+16) repeated 8 times in the low half and (p_i,j+1, p_i,j+17) in the high one
(madd_x's table, one 32-byte run a digit and even j, shared by every group) gives each row's
two products summed. |pair| <= 2 15 128 = 3840, so the 8 loads of a sub-block sum exactly in
int16 (<= 30720 < 2^15: no saturation, no wrap), then are widened to int32 once a sub-block.
Signed nibbles (Q4_0, q - 8) subtract 8 xs_s from t_s, as every nibble kernel does.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from attnviz.engine.reading.qpack import LANES

try:
    from llvmlite import ir
    from numba import njit, prange, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from attnviz.engine.computing import kernel_cache, qbytes, qdot
    from attnviz.engine.computing.qx import PIECES, pieces_x
except ImportError:  # qmatvec then has no kernels
    qdot = None
else:
    kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

MADD = bool(qdot and qdot.numba and qdot.MADD)
RUN = 32  # bytes of x's table a digit and an even byte j: 16 rows' worth of digit pairs, twice
TABLE = PIECES * 8 * RUN  # bytes of x's table a sub-block

if MADD:
    V32, VF = qdot.V32, qdot.VF
    _B32, _W16 = ir.VectorType(ir.IntType(8), 32), ir.VectorType(ir.IntType(16), 16)
    _D8, _M32 = ir.VectorType(ir.IntType(32), 8), ir.VectorType(ir.IntType(32), 32)
    ir_const, ir_at, ir_splat, ir_fma, ir_prefetch = qdot.ir_const, qdot.ir_at, qdot.ir_splat, qdot.ir_fma, qdot.ir_prefetch
    # vpunpcklbw, vpunpckhbw of (low nibbles, high nibbles): in each 128-bit half (byte j, j + 1),
    # rows 0-7, then 8-15, as (input j, input j + 16) byte pairs
    _PAIRS = [[i for h in (0, 1) for r in range(8) for i in (16 * h + 8 * part + r, 32 + 16 * h + 8 * part + r)]
              for part in (0, 1)]

    def _rows_sum(builder, acc):
        """<16 x i16> (rows 0-7 of an even byte in its low half, of an odd byte in its high
        half) -> <8 x i32>: each row's two sums, widened and added."""
        halves = (builder.shuffle_vector(acc, acc, ir.Constant(_D8, list(range(h, h + 8)))) for h in (0, 8))
        low, high = (builder.sext(v, _D8) for v in halves)
        return builder.add(low, high)

    def _madd_rows_intrinsic(kind: str):
        """The intrinsic rows(q, qo, scale, offset, so, xt, xto, cs, cso, xs, xso, n_sub, y, yo) of
        the nibble kinds where the CPU has AVX2 (MADD): as qdot's _vnni_rows_intrinsic, with x's
        digits as madd_x's table (TABLE bytes a sub-block at xt[xto + s TABLE:])."""
        @intrinsic
        def rows(typingctx, q, qo, scale, offset, so, xt, xto, cs, cso, xs, xso, n_sub, y, yo):
            sig = types.void(q, qo, scale, offset, so, xt, xto, cs, cso, xs, xso, n_sub, y, yo)

            def codegen(context, builder, signature, args):
                qa, qo_, sa, oa, so_, ta, to_, ca, co_, xsa, xso_, ns, ya, yo_ = args
                qt, _, st, ot, _, tt, _, ct, _, xst, _, _, yt, _ = signature.args
                zero, wzero = ir.Constant(VF, [0.0] * LANES), ir.Constant(_W16, [0] * 16)
                madd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_W16, [_B32, _B32]),
                                                      "llvm.x86.avx2.pmadd.ub.sw")
                nibble, four = ir.Constant(_B32, [15] * 32), ir.Constant(_B32, [4] * 32)
                total = cgutils.alloca_once(builder, VF)
                builder.store(zero, total)
                at = partial(ir_at, context, builder)  # at(ty, arr, offset, vt=None)

                def pin(v):  # v, in a register here: LLVM otherwise reorders the loads of a
                    # sub-block, holding every one's vectors at once (spilled to the stack)
                    return builder.asm(ir.FunctionType(_W16, [_W16]), "", "=x,0", [v], side_effect=True)

                def sub_blocks(offsets: bool):
                    with cgutils.for_range(builder, ns) as loop:
                        s = loop.index
                        qb = builder.add(qo_, builder.mul(s, ir_const(16 * LANES)))
                        tb = builder.add(to_, builder.mul(s, ir_const(TABLE)))
                        for line in range(0, 16 * LANES, 64):  # (qdot's distance: the stream is not this loop's bound)
                            ir_prefetch(builder, at(qt, qa, builder.add(qb, ir_const(qdot.AHEAD + line))))
                        acc = [[wzero] * PIECES, [wzero] * PIECES]  # rows 0-7, 8-15: int16 sums, exact
                        for k in range(8):  # bytes 2k, 2k + 1 of the 16 rows
                            v = builder.load(at(qt, qa, builder.add(qb, ir_const(32 * k)), _B32), align=1)
                            low, high = builder.and_(v, nibble), builder.lshr(v, four)
                            pairs = [builder.shuffle_vector(low, high, ir.Constant(_M32, p))
                                     for p in _PAIRS]
                            for i in range(PIECES):
                                xv = builder.load(at(tt, ta, builder.add(tb, ir_const(RUN * (8 * i + k))), _B32),
                                                  align=1)
                                for h in (0, 1):
                                    acc[h][i] = builder.add(acc[h][i], builder.call(madd, [pairs[h], xv]))
                            acc = [[pin(a) for a in part] for part in acc]
                        s0, s1, s2 = (builder.shuffle_vector(_rows_sum(builder, a), _rows_sum(builder, b),
                                                             ir.Constant(V32, list(range(16))))
                                      for a, b in zip(*acc))
                        top = builder.sitofp(builder.add(builder.shl(s0, ir.Constant(V32, [8] * LANES)), s1), VF)
                        t = ir_fma(builder, top, ir.Constant(VF, [256.0] * LANES), builder.sitofp(s2, VF))
                        t = builder.fmul(t, ir_splat(builder, builder.load(at(ct, ca, builder.add(co_, s)))))
                        qdot.add_sub_block(context, builder, kind, t, s, (xst, xsa, xso_), (st, sa), (ot, oa),
                                           so_, total, offsets)

                qdot.every_sub_block(context, builder, sub_blocks, (ot, oa), total, (yt, ya, yo_))
                return context.get_dummy_value()
            return sig, codegen
        return rows

    _MNIB, _MNIB8 = _madd_rows_intrinsic("nib"), _madd_rows_intrinsic("nib8")

    @njit(cache=True, nogil=True)
    def madd_x(x, n_sub):
        """x [m, n_sub 32] -> ((xt int8 [m, n_sub TABLE], cs float32 [m, n_sub]), xs [m, n_sub]):
        pieces_x's digits p_ij and units, laid out for vpmaddubsw: per sub-block, digit i and even
        byte j, a RUN of (p_ij, p_i,j+16) 8 times, then (p_i,j+1, p_i,j+17) 8 times."""
        (xp, cs), xs = pieces_x(x, n_sub)
        m = x.shape[0]
        xt = np.empty((m, n_sub * TABLE // 8), np.int64)  # (written 4 pairs at a time)
        for r in range(m):
            d = xp[r].view(np.uint8)
            for b in range(n_sub * PIECES):  # digit i of sub-block s: b = s PIECES + i
                for j in range(16):  # the pair (input j, j + 16) 4 times; 8 times in 2 words
                    pair = np.int64(d[32 * b + j]) | (np.int64(d[32 * b + j + 16]) << 8)
                    at = 32 * b + 2 * j  # (RUN bytes a j pair: 16 bytes a j)
                    xt[r, at] = xt[r, at + 1] = pair * 0x0001000100010001
        return (xt.view(np.int8), cs), xs

    # the kernels as qdot's (every group g of 16 rows by one call of its body: any number of
    # threads gives the same bits), x as madd_x gives it; written out again, not made by one
    # factory with qdot's: numba's disk cache misses a closure over jitted functions every process
    @njit(cache=True, nogil=True)
    def _g_nib(q, scale, offset, x, xs, y, g):  # rows g 16 .. g 16 + 15 of y, every row of x
        n_sub = q.shape[1]
        xt, cs = x
        for i in range(xs.shape[0]):
            _MNIB(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, xt, i * n_sub * TABLE,
                  cs, i * n_sub, xs, i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(cache=True, nogil=True)
    def _g_nib8(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        xt, cs = x
        for i in range(xs.shape[0]):
            _MNIB8(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, xt, i * n_sub * TABLE,
                   cs, i * n_sub, xs, i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(parallel=True, cache=True, nogil=True)
    def k_nib(q, scale, offset, x, y):
        xt, xs = madd_x(x, q.shape[1])
        for g in prange(q.shape[0]):
            _g_nib(q, scale, offset, xt, xs, y, g)

    @njit(parallel=True, cache=True, nogil=True)
    def k_nib8(q, scale, offset, x, y):
        xt, xs = madd_x(x, q.shape[1])
        for g in prange(q.shape[0]):
            _g_nib8(q, scale, offset, xt, xs, y, g)

    # one thread: no parallel region (qdot's serial twins likewise)
    @njit(cache=True, nogil=True)
    def s_nib(q, scale, offset, x, y):
        xt, xs = madd_x(x, q.shape[1])
        for g in range(q.shape[0]):
            _g_nib(q, scale, offset, xt, xs, y, g)

    @njit(cache=True, nogil=True)
    def s_nib8(q, scale, offset, x, y):
        xt, xs = madd_x(x, q.shape[1])
        for g in range(q.shape[0]):
            _g_nib8(q, scale, offset, xt, xs, y, g)

    SERIAL = {**{k: s for k, s in qbytes.SERIAL.items() if k not in (qdot.k_nib, qdot.k_nib8)},
              k_nib: s_nib, k_nib8: s_nib8}
elif qdot and qdot.numba:
    k_nib, k_nib8, s_nib, s_nib8, SERIAL = qdot.k_nib, qdot.k_nib8, qdot.s_nib, qdot.s_nib8, qbytes.SERIAL
