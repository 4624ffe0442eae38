"""The byte types' kernels (Q8_0, Q5_0, Q5_1, Q5_K: S = 32 inputs a sub-block; Q6_K: S = 16) as
qmatvec.py and the one-row block call them: where the CPU has AVX512-VNNI and VBMI (qdot.VNNI), their
inner sums in integers as the nibble kernels' are (qdot's module docstring); elsewhere qdot's
float32 kernels, named here too.

Each weight q is an int8 (|q| <= 128); x is split per 32 inputs into PIECES = 3 balanced base-256
digits p_ij of N_j = round(x_j / u) (qx.pieces_x). vpdpbusd multiplies unsigned bytes by signed
ones, so the weights go in as q + 128 (their top bit flipped: unsigned, exact) and x's digits as
they are:

    S'_i = sum_j (q_j + 128) p_ij  (exact in int32: |S'_i| <= 32 255 128 < 2^20),
    S_i = S'_i - 128 D_i,           D_i = sum_j p_ij (per sub-block of x: bytes_x)
    t_s = u (256 (256 S_0 + S_1) + S_2)

256 S_0 + S_1 (|.| < 2^28) is summed in int32 and rounded once to float32, then t_s takes one more
rounding (u a power of 2: exact); both within 2^-24 of sum_j |q_j N_j|, the rounding of x within
u / 2 < max |x_s| / TOP (about 2^-23 of it) an input: inside qmatvec's tolerance (1e-5 of sum |x w|;
tests/engine/test_qmatvec.py). A 16-input sub-block (Q6_K) reads one half of its 32 inputs' digits,
under their unit.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from attnviz.engine.reading.qpack import LANES

try:
    import numba  # noqa: F401 (qmatvec asks qdot whether it has kernels)
    from llvmlite import ir
    from numba import njit, prange, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from attnviz.engine.computing import kernel_cache, qdot
    from attnviz.engine.computing.qx import PIECES, pieces_x, sums
except ImportError:  # qmatvec then has no kernels
    qdot = None
else:
    kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

VNNI = bool(qdot and qdot.numba and qdot.VNNI)

if VNNI:
    assert PIECES == 3  # (t_s combines three digits' sums: the module docstring)
    V32, VF = qdot.V32, qdot.VF
    ir_const, ir_at, ir_splat, ir_fma, ir_prefetch = qdot.ir_const, qdot.ir_at, qdot.ir_splat, qdot.ir_fma, qdot.ir_prefetch

    def _ints(builder, value):  # i32 -> <16 x i32>, every lane value
        one = builder.insert_element(ir.Constant(V32, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(one, one, ir.Constant(V32, [0] * LANES))

    def _vnni_bytes_intrinsic(S: int):
        """The intrinsic rows(q, qo, scale, offset, so, xp, xpo, cs, cso, dd, ddo, xs, xso, n_sub,
        y, yo): as qdot's _rows_intrinsic("b32" or "b16"), with x as bytes_x gives it: its digits
        at xp[xpo:] (32-input blocks of PIECES 32), their units at cs[cso:], each S-input
        sub-block's 128 (256 D_0 + D_1), 128 D_2 at dd[ddo + 2 s:]."""
        step = S * LANES  # bytes a sub-block of the group

        @intrinsic
        def rows(typingctx, q, qo, scale, offset, so, xp, xpo, cs, cso, dd, ddo, xs, xso, n_sub, y, yo):
            sig = types.void(q, qo, scale, offset, so, xp, xpo, cs, cso, dd, ddo, xs, xso, n_sub, y, yo)

            def codegen(context, builder, signature, args):
                qa, qo_, sa, oa, so_, pa, po_, ca, co_, da, do_, xsa, xso_, ns, ya, yo_ = args
                qt, _, st, ot, _, pt, _, ct, _, dt, _, xst, _, _, yt, _ = signature.args
                zero, izero = ir.Constant(VF, [0.0] * LANES), ir.Constant(V32, [0] * LANES)
                v64, dot, perm = qdot.ir_vnni(builder)
                flip = ir.Constant(v64, [0x80] * 64)
                total = cgutils.alloca_once(builder, VF)
                builder.store(zero, total)
                at = partial(ir_at, context, builder)  # at(ty, arr, offset, vt=None)

                def four(i):  # <16 x i32>, every lane the four int8 digits at xp[i:i + 4]
                    return _ints(builder, builder.load(at(pt, pa, i, ir.IntType(32)), align=1))

                def sub_blocks(offsets: bool):
                    with cgutils.for_range(builder, ns) as loop:
                        s = loop.index
                        qb = builder.add(qo_, builder.mul(s, ir_const(step)))
                        block = s if S == 32 else builder.lshr(s, ir_const(1))  # x's 32-input block
                        pb = builder.add(po_, builder.mul(block, ir_const(PIECES * 32)))
                        if S == 16:  # the block's second half for an odd sub-block
                            pb = builder.add(pb, builder.mul(builder.and_(s, ir_const(1)), ir_const(16)))
                        for ahead, level in ((qdot.NEAR, 3), (qdot.FAR, 2)):
                            for line in range(0, step, 64):
                                ir_prefetch(builder, at(qt, qa, builder.add(qb, ir_const(ahead + line))), level)
                        acc = [[izero] * PIECES, [izero] * PIECES]  # int32 sums, exact (two chains)
                        for k in range(S // 4):  # run k: inputs 4k..4k + 3 of the 16 rows
                            v = builder.load(at(qt, qa, builder.add(qb, ir_const(64 * k)), v64), align=1)
                            v = builder.xor(builder.call(perm, [v, ir.Constant(v64, qdot.ROW_BYTES)]), flip)
                            v = builder.bitcast(v, V32)  # q + 128, row r's four in lane r
                            for i in range(PIECES):
                                xb = builder.add(pb, ir_const(32 * i + 4 * k))
                                acc[k % 2][i] = builder.call(dot, [acc[k % 2][i], v, four(xb)])
                        s0, s1, s2 = (builder.add(a, b) for a, b in zip(*acc))
                        db = builder.add(do_, builder.mul(s, ir_const(2)))
                        high, low = (_ints(builder, builder.load(at(dt, da, builder.add(db, ir_const(h)))))
                                     for h in (0, 1))
                        top = builder.add(builder.shl(s0, ir.Constant(V32, [8] * LANES)), s1)
                        top = builder.sitofp(builder.sub(top, high), VF)
                        t = ir_fma(builder, top, ir.Constant(VF, [256.0] * LANES),
                                 builder.sitofp(builder.sub(s2, low), VF))
                        t = builder.fmul(t, ir_splat(builder, builder.load(at(ct, ca, builder.add(co_, block)))))
                        qdot.add_sub_block(context, builder, "b32", t, s, (xst, xsa, xso_), (st, sa), (ot, oa),
                                            so_, total, offsets)

                qdot.every_sub_block(context, builder, sub_blocks, (ot, oa), total, (yt, ya, yo_))
                return context.get_dummy_value()
            return sig, codegen
        return rows

    _VB32, _VB16 = _vnni_bytes_intrinsic(32), _vnni_bytes_intrinsic(16)

    @njit(cache=True, nogil=True)
    def bytes_x(x, n_sub, S):
        """x [m, n_sub S] -> ((xp, cs, dd), xs): pieces_x's digits and units of x, dd int32
        [m, n_sub 2] each S-input sub-block's 128 (256 D_0 + D_1) and 128 D_2 (D_i: the sum of
        its digits i), xs [m, n_sub] its sums of x."""
        (xp, cs), xs = pieces_x(x, n_sub * S // 32)
        if S != 32:
            xs = sums(x, n_sub, S)
        dd = np.empty((x.shape[0], 2 * n_sub), np.int32)
        for i in range(x.shape[0]):
            for s in range(n_sub):
                b = (s * S // 32) * PIECES * 32 + (s * S) % 32
                d0 = d1 = d2 = 0
                for j in range(S):
                    d0 += xp[i, b + j]
                    d1 += xp[i, b + 32 + j]
                    d2 += xp[i, b + 64 + j]
                dd[i, 2 * s] = 128 * (256 * d0 + d1)
                dd[i, 2 * s + 1] = 128 * d2
        return (xp, cs, dd), xs

    @njit(cache=True, nogil=True)
    def _g_b32(q, scale, offset, x, xs, y, g):  # rows g 16 .. g 16 + 15 of y, every row of x
        n_sub = q.shape[1]
        xp, cs, dd = x
        for i in range(xs.shape[0]):
            _VB32(q, g * n_sub * 32 * LANES, scale, offset, g * n_sub * LANES, xp, i * n_sub * PIECES * 32,
                  cs, i * n_sub, dd, i * n_sub * 2, xs, i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(cache=True, nogil=True)
    def _g_b16(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        xp, cs, dd = x
        for i in range(xs.shape[0]):
            _VB16(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, xp, i * (n_sub // 2) * PIECES * 32,
                  cs, i * (n_sub // 2), dd, i * n_sub * 2, xs, i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(parallel=True, cache=True, nogil=True)
    def k_b32(q, scale, offset, x, y):
        xt, xs = bytes_x(x, q.shape[1], 32)
        for g in prange(q.shape[0]):
            _g_b32(q, scale, offset, xt, xs, y, g)

    @njit(parallel=True, cache=True, nogil=True)
    def k_b16(q, scale, offset, x, y):
        xt, xs = bytes_x(x, q.shape[1], 16)
        for g in prange(q.shape[0]):
            _g_b16(q, scale, offset, xt, xs, y, g)

    # one thread: no parallel region (qdot's serial twins likewise)
    @njit(cache=True, nogil=True)
    def s_b32(q, scale, offset, x, y):
        xt, xs = bytes_x(x, q.shape[1], 32)
        for g in range(q.shape[0]):
            _g_b32(q, scale, offset, xt, xs, y, g)

    @njit(cache=True, nogil=True)
    def s_b16(q, scale, offset, x, y):
        xt, xs = bytes_x(x, q.shape[1], 16)
        for g in range(q.shape[0]):
            _g_b16(q, scale, offset, xt, xs, y, g)

    SERIAL = {**{k: s for k, s in qdot.SERIAL.items() if k not in (qdot.k_b32, qdot.k_b16)},
              k_b32: s_b32, k_b16: s_b16}
elif qdot and qdot.numba:
    k_b32, k_b16, s_b32, s_b16, SERIAL = qdot.k_b32, qdot.k_b16, qdot.s_b32, qdot.s_b16, qdot.SERIAL
