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

Nibbles where the CPU has AVX512-VNNI and VBMI (VNNI): float32 FMAs, one a weight, bound the loop
above; there t_s is summed in integers, 64 products an instruction (vpdpbusd). x is split per
sub-block into PIECES = 3 int8 pieces (pieces_x), the balanced base-256 digits of N_j =
round(x_j / u): x_j = (65536 p_0j + 256 p_1j + p_2j) u + e_j, u the power of 2 that puts max
|x_s| within TOP u (so |N_j| <= TOP: digits in [-128, 127]), |e_j| <= u / 2 < max |x_s| / TOP,
about 2^-23 max |x_s| (a power of 2: an x that is a small multiple of u, a one-hot 1, exact).
Then t_s = u (256 (256 S_0 + S_1) + S_2), S_i = sum_j q_j p_ij exact in int32
(vpermb first brings each row's four bytes of a 64-byte run into its lane); |S_i| <= 32 15 128,
so 256 S_0 + S_1 < 2^24 is exact as a float32, and t_s takes one rounding (u: a power of 2).
Its error beside float32's rounding is sum_j q_j e_j, each |e_j| under 2^-23 of max |x_s|
(tests/engine/test_qkernels_path.py holds a tiny model's cached steps within 1e-5 of its float32
run). The dot products, about one a cycle, bound the loop. Where the CPU has AVX2 but not VNNI
(MADD), engine/computing/qmadd.py sums the same digits' products with vpmaddubsw: the same bits.
"""

from __future__ import annotations

from functools import partial

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
    from attnviz.engine.computing.qx import PIECES, TOP, pieces_x, sums  # noqa: F401 (x as the kernels take it)
except ImportError:  # qmatvec then has no kernels
    numba = None
else:
    kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

CHAINS = 4  # independent FMA chains a sub-block's sum is split over
AHEAD = 4096  # bytes of q asked for ahead of the sub-block being read (a plateau from 3 to 8 KiB)
# the VNNI loop needs q sooner than one hint brings it: asked for into L2 FAR bytes ahead, then into L1 NEAR
NEAR, FAR = 3072, 12288


def _numba_features() -> set:
    """The CPU features numba compiles for ("+avx512f", ...): the host's as numba takes them
    (NUMBA_ENABLE_AVX=0, numba's default on some CPUs and VMs, leaves out every AVX one); empty
    where numba is told to compile for a named or generic CPU, or the host's are unknown."""
    if numba.config.CPU_NAME or numba.config.CPU_FEATURES:
        return set()
    try:
        from numba.core.codegen import get_host_cpu_features
        return set(get_host_cpu_features().split(","))
    except RuntimeError:  # (features unknown on this host)
        return set()


def _permute_table() -> bool:
    """Whether numba compiles for a CPU with AVX-512 (vpermps: a 16-entry table lookup on vector
    lanes)."""
    return "+avx512f" in _numba_features()


def _vnni() -> bool:
    """Whether numba compiles for a CPU with AVX512-VNNI (vpdpbusd: 16 lanes of four byte products
    summed into int32) and VBMI (vpermb: a byte permutation)."""
    return {"+avx512f", "+avx512vnni", "+avx512vbmi"} <= _numba_features()


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
    _V8, V32, VF, _VH = (ir.VectorType(t, LANES) for t in (ir.IntType(8), _I32, _F32, ir.HalfType()))
    PERMUTE = _permute_table()
    VNNI = _vnni()
    # the nibble kernels' vpmaddubsw sums (qmadd.py): on AVX2 without AVX-512 (where they were
    # measured; an AVX-512 CPU without VNNI keeps the 16-lane float kernels with their permute table)
    MADD = not VNNI and not PERMUTE and "+avx2" in _numba_features()
    HALF_IN_HARDWARE = _half_in_hardware()
    _V16 = ir.VectorType(ir.IntType(16), LANES)

    def ir_splat(builder, value):  # float -> <16 x float>, every lane value
        undef = ir.Constant(VF, ir.Undefined)
        one = builder.insert_element(undef, value, ir.Constant(_I32, 0))
        return builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES))

    def ir_fma(builder, a, b, c):  # a b + c, lane by lane: fused where the CPU has FMA (fmuladd:
        # a CPU without it gets a multiply and an add, not a libm call a lane)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VF, [VF] * 3),
                                            f"llvm.fmuladd.v{LANES}f32")
        return builder.call(fn, [a, b, c])

    def ir_at(context, builder, aryty, ary, offset, vt=None):  # &ary[offset], as a vt pointer if given
        p = builder.gep(context.make_array(aryty)(context, builder, ary).data, [offset])
        return p if vt is None else builder.bitcast(p, vt.as_pointer())

    def ir_vnni(builder):
        """<64 x i8>, and the two VNNI kernels' instructions: vpdpbusd (acc + unsigned bytes times
        signed bytes, four a lane) and vpermb (bytes gathered by index)."""
        v64 = ir.VectorType(ir.IntType(8), 64)
        dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(V32, [V32] * 3),
                                             "llvm.x86.avx512.vpdpbusd.512")
        perm = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v64, [v64, v64]),
                                              "llvm.x86.avx512.permvar.qi.512")
        return v64, dot, perm

    def ir_const(k):
        return ir.Constant(_I64, k)

    def ir_prefetch(builder, pointer, level=3):  # a read hint (level 3: kept in every cache level, 2:
        # in L2 and beyond)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32]), "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(pointer, _I8P), ir.Constant(_I32, 0), ir.Constant(_I32, level),
                          ir.Constant(_I32, 1)])

    def _low_nibbles(builder, v):  # <16 x i32> bytes -> <16 x float> of their low nibbles
        if PERMUTE:  # (vpermps reads the index's low 4 bits alone)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VF, [VF, V32]),
                                                "llvm.x86.avx512.permvar.sf.512")
            return builder.call(fn, [ir.Constant(VF, [float(i) for i in range(LANES)]), v])
        return builder.uitofp(builder.and_(v, ir.Constant(V32, [15] * LANES)), VF)

    def _half_bits(builder, h):
        """<16 x i16> float16 bits -> <16 x float>, exact for every value (normal, subnormal, zero,
        inf, nan) with integer arithmetic: the exponent rebiased from 15 to 127, a subnormal m
        2^-24 made as (1 + m / 1024) 2^-14 - 2^-14 (both exact), the sign put back."""
        def c(k):
            return ir.Constant(V32, [k] * LANES)

        v = builder.zext(h, V32)
        o = builder.shl(builder.and_(v, c(0x7FFF)), c(13))  # exponent and mantissa in float32's place
        e = builder.and_(o, c(0x0F800000))  # the exponent alone
        o = builder.add(o, c(0x38000000))  # + (127 - 15) << 23
        inf = builder.add(o, c(0x38000000))  # inf, nan: exponent 255
        sub = builder.bitcast(builder.fsub(builder.bitcast(builder.add(o, c(0x00800000)), VF),
                                           ir.Constant(VF, [2.0 ** -14] * LANES)), V32)
        o = builder.select(builder.icmp_unsigned("==", e, c(0x0F800000)), inf, o)
        o = builder.select(builder.icmp_unsigned("==", e, c(0)), sub, o)
        return builder.bitcast(builder.or_(o, builder.shl(builder.and_(v, c(0x8000)), c(16))), VF)

    def _scales(context, builder, ty, arr, at):  # <16 x float> from float32 or float16 bits (exact)
        def vec(vt):
            return ir_at(context, builder, ty, arr, at, vt)
        if ty.dtype != types.uint16:
            return builder.load(vec(VF), align=4)
        if HALF_IN_HARDWARE:
            return builder.fpext(builder.load(vec(_VH), align=2), VF)
        return _half_bits(builder, builder.load(vec(_V16), align=2))

    def add_sub_block(context, builder, kind, t, s, xs, scale, offset, so, total, offsets: bool):
        """total += scale_s t + offset_s xs_s (the offset where `offsets`) for sub-block s, t its
        16 rows' sum of q x (less 8 xs_s for "nib8": q - 8); xs: (type, array, start) of the
        sub-block sums; scale, offset: (type, array), the group's first at `so`."""
        (xst, xsa, xso), (st, sa), (ot, oa) = xs, scale, offset
        c = ir_splat(builder, builder.load(ir_at(context, builder, xst, xsa, builder.add(xso, s))))
        if kind == "nib8":  # sum (q - 8) x = sum q x - 8 xs_s
            t = ir_fma(builder, ir.Constant(VF, [-8.0] * LANES), c, t)
        sb = builder.add(so, builder.mul(s, ir_const(LANES)))
        r = ir_fma(builder, _scales(context, builder, st, sa, sb), t, builder.load(total))
        if offsets:
            r = ir_fma(builder, _scales(context, builder, ot, oa, sb), c, r)
        builder.store(r, total)

    def every_sub_block(context, builder, sub_blocks, offset, total, y):
        """sub_blocks(offsets) with the offsets or without (an empty offset array: none), then
        y[yo:yo + 16] = total; y: (type, array, yo). Two loops, the test outside them: no branch a
        sub-block, the same arithmetic."""
        ot, oa = offset
        has_offset = builder.icmp_unsigned("!=", context.make_array(ot)(context, builder, oa).nitems,
                                           ir_const(0))
        with builder.if_else(has_offset, likely=True) as (with_offsets, without):
            with with_offsets:
                sub_blocks(True)
            with without:
                sub_blocks(False)
        yt, ya, yo = y
        builder.store(builder.load(total), builder.bitcast(ir_at(context, builder, yt, ya, yo), VF.as_pointer()),
                      align=4)

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
                zero = ir.Constant(VF, [0.0] * LANES)
                total = cgutils.alloca_once(builder, VF)  # (a register once optimised)
                builder.store(zero, total)  # (here: the entry block's store runs once a function)

                def vec(ty, arr, offset, vt):
                    return ir_at(context, builder, ty, arr, offset, vt)

                def x_at(base, j):
                    return ir_splat(builder, builder.load(ir_at(context, builder, xt, xa, builder.add(base, ir_const(j)))))

                def sub_blocks(offsets: bool):  # the loop over sub-blocks, with or without offsets
                    with cgutils.for_range(builder, ns) as loop:
                        s = loop.index
                        qb = builder.add(qo_, builder.mul(s, ir_const(step)))
                        xb = builder.add(xo_, builder.mul(s, ir_const(S)))
                        for line in range(0, step, 64):
                            ir_prefetch(builder, ir_at(context, builder, qt, qa, builder.add(qb, ir_const(AHEAD + line))))
                        acc = [zero] * CHAINS
                        for j in range(step // LANES):
                            v = builder.load(vec(qt, qa, builder.add(qb, ir_const(LANES * j)), _V8), align=1)
                            if nibbles:  # l x'_j + b x''_j (module docstring)
                                v = builder.zext(v, V32)
                                pairs = ((_low_nibbles(builder, v), j), (builder.uitofp(v, VF), j + 16))
                            else:
                                pairs = ((builder.sitofp(builder.sext(v, V32), VF), j),)
                            for w, at in pairs:
                                c = (len(pairs) * j + (at != j)) % CHAINS
                                acc[c] = ir_fma(builder, w, x_at(xb, at), acc[c])
                        while len(acc) > 1:  # (pairwise: CHAINS a power of 2)
                            acc = [builder.fadd(acc[i], acc[i + 1]) for i in range(0, len(acc), 2)]
                        add_sub_block(context, builder, kind, acc[0], s, (xst, xsa, xso_), (st, sa), (ot, oa),
                                       so_, total, offsets)

                every_sub_block(context, builder, sub_blocks, (ot, oa), total, (yt, ya, yo_))
                return context.get_dummy_value()
            return sig, codegen
        return rows

    ROWS = {kind: _rows_intrinsic(kind) for kind in ("nib", "nib8", "b32", "b16")}

    # vpermb's indices: a 64-byte run of q holds bytes j = 4k..4k + 3 of 16 rows as [j % 4, row];
    # lane r of the permuted run holds row r's four bytes
    ROW_BYTES = [16 * (i % 4) + i // 4 for i in range(64)]

    def _vnni_rows_intrinsic(kind: str):
        """The intrinsic rows(q, qo, scale, offset, so, xp, xpo, cs, cso, xs, xso, n_sub, y, yo) of
        the nibble kinds where the CPU has VNNI: as _rows_intrinsic's, with x as pieces_x splits it
        (its int8 pieces at xp[xpo + s PIECES 32:], the sub-block's unit at cs[cso + s])."""
        @intrinsic
        def rows(typingctx, q, qo, scale, offset, so, xp, xpo, cs, cso, xs, xso, n_sub, y, yo):
            sig = types.void(q, qo, scale, offset, so, xp, xpo, cs, cso, xs, xso, n_sub, y, yo)

            def codegen(context, builder, signature, args):
                qa, qo_, sa, oa, so_, pa, po_, ca, co_, xsa, xso_, ns, ya, yo_ = args
                qt, _, st, ot, _, pt, _, ct, _, xst, _, _, yt, _ = signature.args
                zero, izero = ir.Constant(VF, [0.0] * LANES), ir.Constant(V32, [0] * LANES)
                v64, dot, perm = ir_vnni(builder)
                nibble = ir.Constant(V32, [0x0F0F0F0F] * LANES)
                total = cgutils.alloca_once(builder, VF)
                builder.store(zero, total)
                at = partial(ir_at, context, builder)  # at(ty, arr, offset, vt=None)

                def four(i):  # <16 x i32>, every lane the four int8 pieces at xp[i:i + 4]
                    v = builder.load(at(pt, pa, i, _I32), align=1)
                    one = builder.insert_element(ir.Constant(V32, ir.Undefined), v, ir.Constant(_I32, 0))
                    return builder.shuffle_vector(one, one, ir.Constant(V32, [0] * LANES))

                def sub_blocks(offsets: bool):
                    with cgutils.for_range(builder, ns) as loop:
                        s = loop.index
                        qb = builder.add(qo_, builder.mul(s, ir_const(16 * LANES)))
                        pb = builder.add(po_, builder.mul(s, ir_const(PIECES * 32)))
                        for ahead, level in ((NEAR, 3), (FAR, 2)):
                            for line in range(0, 16 * LANES, 64):
                                ir_prefetch(builder, at(qt, qa, builder.add(qb, ir_const(ahead + line))), level)
                        low, high = [izero] * PIECES, [izero] * PIECES  # int32 sums, exact
                        for k in range(4):
                            v = builder.load(at(qt, qa, builder.add(qb, ir_const(64 * k)), v64), align=1)
                            v = builder.bitcast(builder.call(perm, [v, ir.Constant(v64, ROW_BYTES)]), V32)
                            lo = builder.and_(v, nibble)  # inputs 4k..4k + 3 as bytes 0..15
                            hi = builder.and_(builder.lshr(v, ir.Constant(V32, [4] * LANES)), nibble)
                            for i in range(PIECES):
                                xb = builder.add(pb, ir_const(32 * i + 4 * k))
                                low[i] = builder.call(dot, [low[i], lo, four(xb)])
                                high[i] = builder.call(dot, [high[i], hi, four(builder.add(xb, ir_const(16)))])
                        s0, s1, s2 = (builder.add(a, b) for a, b in zip(low, high))
                        top = builder.sitofp(builder.add(builder.shl(s0, ir.Constant(V32, [8] * LANES)), s1), VF)
                        t = ir_fma(builder, top, ir.Constant(VF, [256.0] * LANES), builder.sitofp(s2, VF))
                        t = builder.fmul(t, ir_splat(builder, builder.load(at(ct, ca, builder.add(co_, s)))))
                        add_sub_block(context, builder, kind, t, s, (xst, xsa, xso_), (st, sa), (ot, oa),
                                       so_, total, offsets)

                every_sub_block(context, builder, sub_blocks, (ot, oa), total, (yt, ya, yo_))
                return context.get_dummy_value()
            return sig, codegen
        return rows

    if VNNI:
        ROWS.update({f"vnni_{kind}": _vnni_rows_intrinsic(kind) for kind in ("nib", "nib8")})

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


# Each kernel (qmatvec.py's): x rewritten for its kind (nibble_x, or the sub-block sums alone), then every
# group g of 16 rows (in parallel: prange; its serial twin below, range) by one call of its
# group's body, the same for both, so a group's sums are the same bits on any number of threads.
# q, scale, offset, x, y: C-contiguous, read by flat offsets (q uint8 [G, n_sub, step, 16], scale,
# offset float32 or float16 bits [G, n_sub, 16] (offset of size 0: none; Packed.args), x float32
# [m, n_in], y float32 [m, G 16]).
if numba:
    _NIB, _NIB8, _B32, _B16 = (ROWS[k] for k in ("nib", "nib8", "b32", "b16"))

    @njit(cache=True, nogil=True)
    def _g_nib_float(q, scale, offset, x, xs, y, g):  # rows g 16 .. g 16 + 15 of y, every row of x
        n_sub = q.shape[1]
        for i in range(x.shape[0]):
            _NIB(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, x, i * n_sub * 32, xs,
                 i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(cache=True, nogil=True)
    def _g_nib8_float(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        for i in range(x.shape[0]):
            _NIB8(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, x, i * n_sub * 32, xs,
                  i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    _g_nib, _g_nib8, _nib_x = _g_nib_float, _g_nib8_float, nibble_x

if numba and VNNI:  # the nibble kernels on VNNI: x as pieces_x splits it (x: (xp, cs))
    _VNIB, _VNIB8 = ROWS["vnni_nib"], ROWS["vnni_nib8"]

    @njit(cache=True, nogil=True)
    def _g_nib(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        xp, cs = x
        for i in range(xs.shape[0]):
            _VNIB(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, xp, i * n_sub * PIECES * 32,
                  cs, i * n_sub, xs, i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(cache=True, nogil=True)
    def _g_nib8(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        xp, cs = x
        for i in range(xs.shape[0]):
            _VNIB8(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, xp, i * n_sub * PIECES * 32,
                   cs, i * n_sub, xs, i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    _nib_x = pieces_x

if numba:

    @njit(cache=True, nogil=True)
    def _g_b32(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        for i in range(x.shape[0]):
            _B32(q, g * n_sub * 32 * LANES, scale, offset, g * n_sub * LANES, x, i * n_sub * 32, xs,
                 i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(cache=True, nogil=True)
    def _g_b16(q, scale, offset, x, xs, y, g):
        n_sub = q.shape[1]
        for i in range(x.shape[0]):
            _B16(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, x, i * n_sub * 16, xs,
                 i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)

    @njit(parallel=True, cache=True, nogil=True)
    def k_nib(q, scale, offset, x, y):
        xt, xs = _nib_x(x, q.shape[1])
        for g in prange(q.shape[0]):
            _g_nib(q, scale, offset, xt, xs, y, g)

    @njit(parallel=True, cache=True, nogil=True)
    def k_nib8(q, scale, offset, x, y):
        xt, xs = _nib_x(x, q.shape[1])
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
        xt, xs = _nib_x(x, q.shape[1])
        for g in range(q.shape[0]):
            _g_nib(q, scale, offset, xt, xs, y, g)

    @njit(cache=True, nogil=True)
    def s_nib8(q, scale, offset, x, y):
        xt, xs = _nib_x(x, q.shape[1])
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
