"""The LLVM vector code of rowmath's one-row steps (numba intrinsics, compiled into the njit
functions that call them): sums of many terms in one fixed order on 16 lanes (a query row against
a key, softmax's denominator), a query row's scores against a run of keys with its vectors held
in registers, the weighted values of up to 3 heads, a row's max, and cache hints."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# Sums of many terms (a query row against a key, softmax's denominator) on 16 vector lanes, term
# j on lane j % 16, the lanes added in one fixed tree, the terms past the last 16 after: written as
# LLVM vector code, so its order is the same in every function it is compiled into. (fastmath's
# reassoc left the order to the compiler, which chose another where the function was inlined
# into a caller loaded from numba's cache than where it was compiled in the process: a first run
# while numba compiled gave other bits than every later one.)
_VF = ir.VectorType(ir.FloatType(), 16)


def _vectors_at(context, builder, aryty, ary, offset):  # <16 x float>* at a flat element offset
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [offset]), _VF.as_pointer())


def _lanes_total(builder, v):  # <16 x float> -> float: halves added lane by lane to one lane
    width = 16
    while width > 1:
        width //= 2
        half = [ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(at, at + width)))
                for at in (0, width)]
        v = builder.fadd(builder.shuffle_vector(v, v, half[0]), builder.shuffle_vector(v, v, half[1]))
    return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))


def _lanes_codegen(products: bool):
    def codegen(context, builder, signature, args):
        arrays, offsets = args[0:-1:2], [context.cast(builder, o, t, types.intp) for o, t in
                                         zip(args[1:-1:2], signature.args[1:-1:2])]
        n = context.cast(builder, args[-1], signature.args[-1], types.intp)
        acc = cgutils.alloca_once_value(builder, ir.Constant(_VF, [0.0] * 16))
        with cgutils.for_range(builder, n) as loop:
            at = builder.mul(loop.index, ir.Constant(ir.IntType(64), 16))
            vs = [builder.load(_vectors_at(context, builder, t, a, builder.add(o, at)), align=4)
                  for a, t, o in zip(arrays, signature.args[0:-1:2], offsets)]
            term = builder.fmul(vs[0], vs[1]) if products else vs[0]
            builder.store(builder.fadd(builder.load(acc), term), acc)
        return _lanes_total(builder, builder.load(acc))
    return codegen


@intrinsic
def dot_lanes(typingctx, a, ao, b, bo, n16):
    """sum over j < 16 n16 of a[ao + j] b[bo + j], a and b C-contiguous float32 arrays read at
    flat element offsets (on vector lanes, one order)."""
    return types.float32(a, ao, b, bo, n16), _lanes_codegen(products=True)


@intrinsic
def sum_lanes(typingctx, a, ao, n16):
    """sum over j < 16 n16 of a[ao + j] (as dot_lanes)."""
    return types.float32(a, ao, n16), _lanes_codegen(products=False)


def _dots_codegen(n: int):
    def codegen(context, builder, signature, args):
        tys = signature.args
        ao, as_, bo, n16 = (context.cast(builder, args[i], tys[i], types.intp) for i in (1, 2, 4, 5))
        accs = [cgutils.alloca_once_value(builder, ir.Constant(_VF, [0.0] * 16)) for _ in range(n)]
        with cgutils.for_range(builder, n16) as loop:
            at = builder.mul(loop.index, ir.Constant(ir.IntType(64), 16))
            vb = builder.load(_vectors_at(context, builder, tys[3], args[3], builder.add(bo, at)), align=4)
            for i, acc in enumerate(accs):
                row = builder.add(ao, builder.mul(as_, ir.Constant(ir.IntType(64), i)))
                va = builder.load(_vectors_at(context, builder, tys[0], args[0], builder.add(row, at)), align=4)
                builder.store(builder.fadd(builder.load(acc), builder.fmul(va, vb)), acc)
        return context.make_tuple(builder, signature.return_type,
                                  [_lanes_total(builder, builder.load(acc)) for acc in accs])
    return codegen


def _dots_lanes(n: int):
    def typer(typingctx, a, ao, as_, b, bo, n16):
        return types.UniTuple(types.float32, n)(a, ao, as_, b, bo, n16), _dots_codegen(n)
    typer.__name__ = f"dots_lanes_{n}"
    typer.__doc__ = f"""({n} float32): dot_lanes of a at ao + i as_ and b at bo for i < {n}, each
    the same operations in the same order as dot_lanes' (the same bits), b's vectors loaded once
    for all {n}."""
    return intrinsic(typer)


dots_lanes_2, dots_lanes_3 = _dots_lanes(2), _dots_lanes(3)


def _splat(builder, x):  # float -> <16 x float>, every lane x
    one = builder.insert_element(ir.Constant(_VF, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(ir.IntType(32), 16), [0] * 16))



def _prefetch(context, builder, aryty, ary, offset):  # a hint: a's element at a flat offset is read soon
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    fn = builder.module.declare_intrinsic(  # (read, kept in every cache level, data)
        "llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
    data = context.make_array(aryty)(context, builder, ary).data
    builder.call(fn, [builder.bitcast(builder.gep(data, [offset]), i8p), i32(0), i32(3), i32(1)])


@intrinsic
def prefetch_at(typingctx, a, offset):
    """A hint that a[offset] (a flat element offset) is read soon: its cache line fetched."""
    def codegen(context, builder, signature, args):
        _prefetch(context, builder, signature.args[0], args[0],
                  context.cast(builder, args[1], signature.args[1], types.intp))
        return context.get_dummy_value()
    return types.void(a, offset), codegen


def _weighted_codegen(nh: int, nv: int):
    def codegen(context, builder, signature, args):
        tys = signature.args
        ao, as_, vo, vs, n, zo, zs = (context.cast(builder, args[i], tys[i], types.intp)
                                      for i in (1, 2, 4, 5, 6, 8, 9))
        accs = [[cgutils.alloca_once_value(builder, ir.Constant(_VF, [0.0] * 16)) for _ in range(nv)]
                for _ in range(nh)]
        a_data = context.make_array(tys[0])(context, builder, args[0]).data
        step = [ir.Constant(ir.IntType(64), 16 * c) for c in range(nv)]
        with cgutils.for_range(builder, n) as loop:
            row = builder.add(vo, builder.mul(loop.index, vs))
            vecs = [builder.load(_vectors_at(context, builder, tys[3], args[3], builder.add(row, o)), align=4)
                    for o in step]
            for i in range(nh):
                at = builder.add(builder.add(ao, builder.mul(as_, ir.Constant(ir.IntType(64), i))), loop.index)
                w = _splat(builder, builder.load(builder.gep(a_data, [at])))
                for acc, v in zip(accs[i], vecs):
                    builder.store(builder.fadd(builder.load(acc), builder.fmul(w, v)), acc)
        for i in range(nh):
            z_i = builder.add(zo, builder.mul(zs, ir.Constant(ir.IntType(64), i)))
            for acc, o in zip(accs[i], step):
                builder.store(builder.load(acc), _vectors_at(context, builder, tys[7], args[7],
                                                             builder.add(z_i, o)), align=4)
        return context.get_dummy_value()
    return codegen


def _weighted_lanes(nh: int, nv: int):
    def typer(typingctx, a, ao, as_, v, vo, vs, n, z, zo, zs):
        return types.void(a, ao, as_, v, vo, vs, n, z, zo, zs), _weighted_codegen(nh, nv)
    typer.__name__ = f"weighted_lanes_{nh}x{nv}"
    typer.__doc__ = f"""z[zo + i zs + j] = (..(0 + a[ao + i as_] v[vo + j]) + ..) + a[ao + i as_ + n - 1]
    v[vo + (n - 1) vs + j] for i < {nh} heads and j < {16 * nv} (flat element offsets, rows vs apart):
    each output's sum over positions in order, side by side on vector lanes, each value row
    loaded once for the {nh} heads."""
    return intrinsic(typer)


(weighted_1x1, weighted_1x2, weighted_1x4, weighted_2x1, weighted_2x2, weighted_2x4, weighted_3x1,
 weighted_3x2, weighted_3x4) = (_weighted_lanes(nh, nv) for nh in (1, 2, 3) for nv in (1, 2, 4))


def _keys_codegen(nh: int, n16: int):
    def codegen(context, builder, signature, args):
        tys = signature.args
        ao, as_, ko, T, oo, os_, vo, vs, ahead = (context.cast(builder, args[i], tys[i], types.intp)
                                                  for i in (1, 2, 4, 5, 7, 8, 10, 11, 12))
        i64 = ir.IntType(64)

        def at(base, *terms):  # base + the sum of products (a, b) and constants
            for term in terms:
                base = builder.add(base, builder.mul(*term) if isinstance(term, tuple) else ir.Constant(i64, term))
            return base
        d = ir.Constant(i64, 16 * n16)
        qv = [[builder.load(_vectors_at(context, builder, tys[0], args[0],
                                        at(ao, (as_, ir.Constant(i64, i)), 16 * j)), align=4)
               for j in range(n16)] for i in range(nh)]  # (the query rows, loaded once)
        out = context.make_array(tys[6])(context, builder, args[6]).data
        with cgutils.for_range(builder, T) as loop:
            t = loop.index
            key = at(ko, (t, d))
            with builder.if_then(builder.icmp_signed("<", builder.add(t, ahead), T)):
                for j in range(n16):
                    _prefetch(context, builder, tys[3], args[3], at(key, (ahead, d), 16 * j))
            for j in range(n16):
                _prefetch(context, builder, tys[9], args[9], at(vo, (t, vs), 16 * j))
            kv = [builder.load(_vectors_at(context, builder, tys[3], args[3], at(key, 16 * j)), align=4)
                  for j in range(n16)]
            for i in range(nh):
                acc = ir.Constant(_VF, [0.0] * 16)
                for j in range(n16):
                    acc = builder.fadd(acc, builder.fmul(qv[i][j], kv[j]))
                builder.store(_lanes_total(builder, acc),
                              builder.gep(out, [at(oo, (os_, ir.Constant(i64, i)), (t, ir.Constant(i64, 1)))]))
        return context.get_dummy_value()
    return codegen


def _keys_run(nh: int, n16: int):
    def typer(typingctx, a, ao, as_, k, ko, T, out, oo, os_, v, vo, vs, ahead):
        return types.void(a, ao, as_, k, ko, T, out, oo, os_, v, vo, vs, ahead), _keys_codegen(nh, n16)
    typer.__name__ = f"keys_run_{nh}x{n16}"
    typer.__doc__ = f"""out[oo + i os_ + t] = dot_lanes of a at ao + i as_ and k at ko + t d (d = {16 * n16})
    for i < {nh} query rows and t < T keys (dot_lanes' operations in its order: the same bits),
    the query rows' vectors loaded once for all T; as each key is read, the key `ahead` on and
    v's row at vo + t vs fetched into the cache (_fetching_keys' hints)."""
    return intrinsic(typer)


# (d_head 64 and 128: the query rows' vectors kept in registers through the keys)
KEYS_RUNS = {(nh, n16): _keys_run(nh, n16) for nh in (1, 2, 3) for n16 in (4, 8)}
keys_run_1x4, keys_run_2x4, keys_run_3x4 = KEYS_RUNS[1, 4], KEYS_RUNS[2, 4], KEYS_RUNS[3, 4]
keys_run_1x8, keys_run_2x8, keys_run_3x8 = KEYS_RUNS[1, 8], KEYS_RUNS[2, 8], KEYS_RUNS[3, 8]


@intrinsic
def max_lanes(typingctx, a, ao, n16):
    """max over j < 16 n16 of a[ao + j] (n16 >= 1), a float32 array read at a flat element offset:
    on 16 vector lanes (term j on lane j % 16), the lanes' maxima then taken in one tree. Where no
    value is NaN, the max a loop in order gives."""
    def codegen(context, builder, signature, args):
        tys = signature.args
        o = context.cast(builder, args[1], tys[1], types.intp)
        n = context.cast(builder, args[2], tys[2], types.intp)

        def vmax(x, y):
            return builder.select(builder.fcmp_ordered(">", y, x), y, x)
        acc = cgutils.alloca_once_value(builder, builder.load(_vectors_at(context, builder, tys[0], args[0], o),
                                                              align=4))
        with cgutils.for_range(builder, n) as loop:
            at = builder.add(o, builder.mul(loop.index, ir.Constant(ir.IntType(64), 16)))
            v = builder.load(_vectors_at(context, builder, tys[0], args[0], at), align=4)
            builder.store(vmax(builder.load(acc), v), acc)
        v, width = builder.load(acc), 16
        while width > 1:
            width //= 2
            half = [ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(at, at + width)))
                    for at in (0, width)]
            v = vmax(builder.shuffle_vector(v, v, half[0]), builder.shuffle_vector(v, v, half[1]))
        return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))
    return types.float32(a, ao, n16), codegen
