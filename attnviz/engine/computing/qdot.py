"""The quantised kernels (engine/computing/qmatvec.py calls them) and their inner loop as LLVM vector
code: 16 output rows of one packed group against one row of x, over every sub-block, summed in
vector registers. (numba's cache of them is renewed when this file or another the kernels are
compiled from changes: engine/computing/kernel_cache.py.)

    y[r] = sum_s scale_s[r] t_s[r] + offset_s[r] xs_s,   t_s[r] = sum_{j in s} q[r, j] x[j]

for the group's 16 rows r at once (one 16-lane vector), xs_s the sum of x over sub-block s.
t_s is float32 fused multiply-adds in four chains (FMA latency is four times its issue rate), the
running sum stays in a register from the first sub-block to the last, and q's next cache lines
are asked for ahead of their use (the stream is the kernels' cost beside the arithmetic).

Nibbles (Q4_0, Q4_1, Q4_K): byte j of a sub-block holds input j (low nibble l) and j + 16 (high
nibble h). With b = l + 16 h, the byte's value, l x_j + h x_{j+16} = l (x_j - x_{j+16} / 16)
+ b (x_{j+16} / 16): so the kernels take x as `nibble_x` rewrites it (the division by 16 is
exact), decode l and convert b, and need no shift; l comes from a 16-entry table where the CPU
has AVX-512 (one permute: no mask, no conversion), else from a mask and a conversion. Signed
nibbles (Q4_0, q - 8) subtract 8 xs_s from t_s. Rounding: x_j - x_{j+16} / 16 is rounded once
more than x_j, well inside qmatvec's tolerance (1e-5 of sum |x w|; tests/engine/test_qmatvec.py).
Bytes (Q8_0, Q5_x, Q5_K, Q6_K): int8 weights widened and converted, S inputs a sub-block.
"""

from __future__ import annotations

import numpy as np

from attnviz.engine.reading.qpack import LANES

try:
    import numba
    from llvmlite import binding as llvm
    from llvmlite import ir
    from numba import njit, prange, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    from attnviz.engine.computing import kernel_cache
except ImportError:  # qmatvec then has no kernels
    numba = None
else:
    kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

CHAINS = 4  # independent FMA chains a sub-block's sum is split over
AHEAD = 4096  # bytes of q asked for ahead of the sub-block being read (a plateau from 3 to 8 KiB)


def _permute_table() -> bool:
    """Whether numba compiles for a CPU with AVX-512 (vpermps: a 16-entry table lookup on vector
    lanes): the host, unless numba is told to compile for a named or generic CPU."""
    if numba.config.CPU_NAME or numba.config.CPU_FEATURES:
        return False
    try:
        return bool(llvm.get_host_cpu_features().get("avx512f", False))
    except RuntimeError:  # (features unknown on this host)
        return False


def _half_in_hardware() -> bool:
    """Whether numba's target CPU converts float16 to float32 in one instruction: a 64-bit ARM, an
    x86 with F16C (numba's rule: the host's features unless NUMBA_CPU_FEATURES or a generic CPU
    says others). Elsewhere LLVM calls compiler-rt's __extendhfsf2, which numba does not link (the
    process aborts): the kernels then convert the bits with integers (_half_bits, the same values)."""
    triple = llvm.get_process_triple()
    if triple.startswith(("aarch64", "arm64")):
        return True
    if not triple.startswith(("x86_64", "i386", "i686")):
        return False
    features = numba.config.CPU_FEATURES
    if features is None:
        try:
            return bool(llvm.get_host_cpu_features().get("f16c", False))
        except RuntimeError:  # (features unknown on this host)
            return False
    return "+f16c" in features.split(",")


if numba:
    _F32, _I32, _I64, _I8P = ir.FloatType(), ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
    _V8, _V32, _VF, _VH = (ir.VectorType(t, LANES) for t in (ir.IntType(8), _I32, _F32, ir.HalfType()))
    PERMUTE = _permute_table()
    HALF_IN_HARDWARE = _half_in_hardware()
    _V16 = ir.VectorType(ir.IntType(16), LANES)

    def _splat(builder, value):  # float -> <16 x float>, every lane value
        undef = ir.Constant(_VF, ir.Undefined)
        one = builder.insert_element(undef, value, ir.Constant(_I32, 0))
        return builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES))

    def _fma(builder, a, b, c):  # a b + c, lane by lane: fused where the CPU has FMA (fmuladd:
        # a CPU without it gets a multiply and an add, not a libm call a lane)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VF, [_VF] * 3),
                                            f"llvm.fmuladd.v{LANES}f32")
        return builder.call(fn, [a, b, c])

    def _at(context, builder, aryty, ary, offset):  # &ary[offset]
        return builder.gep(context.make_array(aryty)(context, builder, ary).data, [offset])

    def _const(k):
        return ir.Constant(_I64, k)

    def _prefetch(builder, pointer):  # a read hint, kept in every cache level
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32]), "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(pointer, _I8P), ir.Constant(_I32, 0), ir.Constant(_I32, 3),
                          ir.Constant(_I32, 1)])

    def _low_nibbles(builder, v):  # <16 x i32> bytes -> <16 x float> of their low nibbles
        if PERMUTE:  # (vpermps reads the index's low 4 bits alone)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VF, [_VF, _V32]),
                                                "llvm.x86.avx512.permvar.sf.512")
            return builder.call(fn, [ir.Constant(_VF, [float(i) for i in range(LANES)]), v])
        return builder.uitofp(builder.and_(v, ir.Constant(_V32, [15] * LANES)), _VF)

    def _half_bits(builder, h):
        """<16 x i16> float16 bits -> <16 x float>, exact for every value (normal, subnormal, zero,
        inf, nan) with integer arithmetic: the exponent rebiased from 15 to 127, a subnormal m
        2^-24 made as (1 + m / 1024) 2^-14 - 2^-14 (both exact), the sign put back."""
        def c(k):
            return ir.Constant(_V32, [k] * LANES)

        v = builder.zext(h, _V32)
        o = builder.shl(builder.and_(v, c(0x7FFF)), c(13))  # exponent and mantissa in float32's place
        e = builder.and_(o, c(0x0F800000))  # the exponent alone
        o = builder.add(o, c(0x38000000))  # + (127 - 15) << 23
        inf = builder.add(o, c(0x38000000))  # inf, nan: exponent 255
        sub = builder.bitcast(builder.fsub(builder.bitcast(builder.add(o, c(0x00800000)), _VF),
                                           ir.Constant(_VF, [2.0 ** -14] * LANES)), _V32)
        o = builder.select(builder.icmp_unsigned("==", e, c(0x0F800000)), inf, o)
        o = builder.select(builder.icmp_unsigned("==", e, c(0)), sub, o)
        return builder.bitcast(builder.or_(o, builder.shl(builder.and_(v, c(0x8000)), c(16))), _VF)

    def _rows_intrinsic(kind: str):
        """The intrinsic rows(q, qo, scale, offset, so, x, xo, xs, xso, n_sub, y, yo): y[yo:yo + 16]
        = the module docstring's sum for the group whose sub-block s has its bytes at
        q[qo + s B 16:], its scales at scale[so + 16 s:] (offset likewise; of size 0: none), its
        inputs at x[xo + s S:] and their sum at xs[xso + s]. `kind`: "nib" (x as nibble_x
        rewrites it), "nib8" (the same, q - 8), "b32" or "b16" (int8 bytes, S = 32 or 16)."""
        nibbles = kind.startswith("nib")
        S = 16 if kind == "b16" else 32
        step = LANES * (16 if nibbles else S)  # bytes a sub-block of the group

        @intrinsic
        def rows(typingctx, q, qo, scale, offset, so, x, xo, xs, xso, n_sub, y, yo):
            sig = types.void(q, qo, scale, offset, so, x, xo, xs, xso, n_sub, y, yo)

            def codegen(context, builder, signature, args):
                qa, qo_, sa, oa, so_, xa, xo_, xsa, xso_, ns, ya, yo_ = args
                qt, _, st, ot, _, xt, _, xst, _, _, yt, _ = signature.args
                zero = ir.Constant(_VF, [0.0] * LANES)
                total = cgutils.alloca_once(builder, _VF)  # (a register once optimised)
                builder.store(zero, total)  # (here: the entry block's store runs once a function)
                has_offset = builder.icmp_unsigned(
                    "!=", context.make_array(ot)(context, builder, oa).nitems, _const(0))

                def vec(ty, arr, offset, vt):
                    return builder.bitcast(_at(context, builder, ty, arr, offset), vt.as_pointer())

                def scales(ty, arr, at):  # <16 x float> from float32 or float16 bits (exact)
                    if ty.dtype != types.uint16:
                        return builder.load(vec(ty, arr, at, _VF), align=4)
                    if HALF_IN_HARDWARE:
                        return builder.fpext(builder.load(vec(ty, arr, at, _VH), align=2), _VF)
                    return _half_bits(builder, builder.load(vec(ty, arr, at, _V16), align=2))

                def x_at(base, j):
                    return _splat(builder, builder.load(_at(context, builder, xt, xa, builder.add(base, _const(j)))))

                def sub_blocks(offsets: bool):  # the loop over sub-blocks, with or without offsets
                    with cgutils.for_range(builder, ns) as loop:
                        s = loop.index
                        qb = builder.add(qo_, builder.mul(s, _const(step)))
                        xb = builder.add(xo_, builder.mul(s, _const(S)))
                        for line in range(0, step, 64):
                            _prefetch(builder, _at(context, builder, qt, qa, builder.add(qb, _const(AHEAD + line))))
                        acc = [zero] * CHAINS
                        for j in range(step // LANES):
                            v = builder.load(vec(qt, qa, builder.add(qb, _const(LANES * j)), _V8), align=1)
                            if nibbles:  # l x'_j + b x''_j (module docstring)
                                v = builder.zext(v, _V32)
                                pairs = ((_low_nibbles(builder, v), j), (builder.uitofp(v, _VF), j + 16))
                            else:
                                pairs = ((builder.sitofp(builder.sext(v, _V32), _VF), j),)
                            for w, at in pairs:
                                c = (len(pairs) * j + (at != j)) % CHAINS
                                acc[c] = _fma(builder, w, x_at(xb, at), acc[c])
                        while len(acc) > 1:  # (pairwise: CHAINS a power of 2)
                            acc = [builder.fadd(acc[i], acc[i + 1]) for i in range(0, len(acc), 2)]
                        t = acc[0]
                        c = _splat(builder, builder.load(_at(context, builder, xst, xsa, builder.add(xso_, s))))
                        if kind == "nib8":  # sum (q - 8) x = sum q x - 8 xs_s
                            t = _fma(builder, ir.Constant(_VF, [-8.0] * LANES), c, t)
                        sb = builder.add(so_, builder.mul(s, _const(LANES)))
                        r = _fma(builder, scales(st, sa, sb), t, builder.load(total))
                        if offsets:
                            r = _fma(builder, scales(ot, oa, sb), c, r)
                        builder.store(r, total)

                # (two loops, the test outside them: no branch a sub-block; the same arithmetic)
                with builder.if_else(has_offset, likely=True) as (with_offsets, without):
                    with with_offsets:
                        sub_blocks(True)
                    with without:
                        sub_blocks(False)
                builder.store(builder.load(total), vec(yt, ya, yo_, _VF), align=4)
                return context.get_dummy_value()
            return sig, codegen
        return rows

    ROWS = {kind: _rows_intrinsic(kind) for kind in ("nib", "nib8", "b32", "b16")}

    @njit(cache=True, nogil=True)
    def nibble_x(x, n_sub):
        """x [m, n_sub 32] -> (x' [m, n_sub 32], xs [m, n_sub]): per sub-block, x'_j = x_j -
        x_{j+16} / 16 and x'_{j+16} = x_{j+16} / 16 for j < 16 (the nibble kernels' x: module
        docstring), and xs the sum of x over it."""
        m = x.shape[0]
        xt = np.empty((m, n_sub * 32), np.float32)
        for i in range(m):
            for s in range(n_sub):
                for j in range(16):
                    h = x[i, s * 32 + j + 16] / np.float32(16.0)
                    xt[i, s * 32 + j + 16] = h
                    xt[i, s * 32 + j] = x[i, s * 32 + j] - h
        return xt, sums(x, n_sub, 32)

    @njit(cache=True, nogil=True)
    def sums(x, n_sub, S):  # x [m, n_sub S] -> [m, n_sub]: each sub-block's sum, as the kernels take it
        xs = np.zeros((x.shape[0], n_sub), np.float32)
        for i in range(x.shape[0]):
            for j in range(S):  # (j outer: the sub-blocks' sums are independent chains, each in order j)
                for s in range(n_sub):
                    xs[i, s] += x[i, s * S + j]
        return xs


# Each kernel (qmatvec.py's): x rewritten for its kind (nibble_x, or the sub-block sums alone), then every
# group g of 16 rows (in parallel: prange; its serial twin below, range) by one call of its
# group's body, the same for both, so a group's sums are the same bits on any number of threads.
# q, scale, offset, x, y: C-contiguous, read by flat offsets (q uint8 [G, n_sub, step, 16], scale,
# offset float32 or float16 bits [G, n_sub, 16] (offset of size 0: none; Packed.args), x float32
# [m, n_in], y float32 [m, G 16]).
if numba:
    _NIB, _NIB8, _B32, _B16 = (ROWS[k] for k in ("nib", "nib8", "b32", "b16"))

    @njit(cache=True, nogil=True, inline="always")  # (inlined: no call a group)
    def _g_nib(q, scale, offset, x, xs, y, g):  # rows g 16 .. g 16 + 15 of y, every row of x
        n_sub = q.shape[1]
        for i in range(x.shape[0]):
            _NIB(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, x, i * n_sub * 32, xs,
                 i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(cache=True, nogil=True, inline="always")
    def _g_nib8(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        for i in range(x.shape[0]):
            _NIB8(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, x, i * n_sub * 32, xs,
                  i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(cache=True, nogil=True, inline="always")
    def _g_b32(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        for i in range(x.shape[0]):
            _B32(q, g * n_sub * 32 * LANES, scale, offset, g * n_sub * LANES, x, i * n_sub * 32, xs,
                 i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(cache=True, nogil=True, inline="always")
    def _g_b16(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        for i in range(x.shape[0]):
            _B16(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, x, i * n_sub * 16, xs,
                 i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(parallel=True, cache=True, nogil=True)
    def k_nib(q, scale, offset, x, y):
        xt, xs = nibble_x(x, q.shape[1])
        for g in prange(q.shape[0]):
            _g_nib(q, scale, offset, xt, xs, y, g)

    @njit(parallel=True, cache=True, nogil=True)
    def k_nib8(q, scale, offset, x, y):
        xt, xs = nibble_x(x, q.shape[1])
        for g in prange(q.shape[0]):
            _g_nib8(q, scale, offset, xt, xs, y, g)

    @njit(parallel=True, cache=True, nogil=True)
    def k_b32(q, scale, offset, x, y):
        xs = sums(x, q.shape[1], 32)
        for g in prange(q.shape[0]):
            _g_b32(q, scale, offset, x, xs, y, g)

    @njit(parallel=True, cache=True, nogil=True)
    def k_b16(q, scale, offset, x, y):
        xs = sums(x, q.shape[1], 16)
        for g in prange(q.shape[0]):
            _g_b16(q, scale, offset, x, xs, y, g)

    # one thread (a call capped at one: the window's, for a small matrix): no parallel region
    @njit(cache=True, nogil=True)
    def s_nib(q, scale, offset, x, y):
        xt, xs = nibble_x(x, q.shape[1])
        for g in range(q.shape[0]):
            _g_nib(q, scale, offset, xt, xs, y, g)

    @njit(cache=True, nogil=True)
    def s_nib8(q, scale, offset, x, y):
        xt, xs = nibble_x(x, q.shape[1])
        for g in range(q.shape[0]):
            _g_nib8(q, scale, offset, xt, xs, y, g)

    @njit(cache=True, nogil=True)
    def s_b32(q, scale, offset, x, y):
        xs = sums(x, q.shape[1], 32)
        for g in range(q.shape[0]):
            _g_b32(q, scale, offset, x, xs, y, g)

    @njit(cache=True, nogil=True)
    def s_b16(q, scale, offset, x, y):
        xs = sums(x, q.shape[1], 16)
        for g in range(q.shape[0]):
            _g_b16(q, scale, offset, x, xs, y, g)

    SERIAL = {k_nib: s_nib, k_nib8: s_nib8, k_b32: s_b32, k_b16: s_b16}
