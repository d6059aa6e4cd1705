"""Explicit SIMD for the one pattern LLVM's auto-vectorizer cannot find: many sequential sums at once.

The frozen formats fix how a scale is summed: in float64, element after element, one chunk (or
bucket) at a time. Each chunk's sum is a chain of dependent adds (4 cycles each), so a plain loop
runs at a quarter of an element per cycle, whatever the compiler does, and reassociating it would
change the bytes. What is allowed is to run 16 chunks' chains side by side, one chunk per SIMD lane:
the sums are bit-identical to 16 separate loops. That needs a transpose (lane k must see element i
of chunk k), which auto-vectorizers do not produce, so it is written here in LLVM IR through numba's
``@intrinsic``: plain, target-independent IR (vector loads, ``shufflevector``, ``fadd``), lowered by
numba's own LLVM to AVX-512 / AVX2 / NEON as the machine has. No C compiler is involved.

Every intrinsic reads a float32 C-contiguous 2-D *tile* of 16 rows (one row per lane) and consumes 16
consecutive columns starting at ``col``: callers copy the chunks' data into the tile (padding with
zeros, which leave every sum unchanged) so the intrinsics never read out of bounds.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

LANES = 16

_F32 = ir.FloatType()
_F64 = ir.DoubleType()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_V16F = ir.VectorType(_F32, LANES)
_V8D = ir.VectorType(_F64, 8)
_V16I = ir.VectorType(_I32, LANES)
_HALVES = (
    ir.Constant(ir.VectorType(_I32, 8), list(range(8))),
    ir.Constant(ir.VectorType(_I32, 8), list(range(8, 16))),
)


def _tile_ok(t) -> bool:
    return isinstance(t, types.Array) and t.dtype == types.float32 and t.ndim == 2 and t.layout == "C"


def _vec_ok(t, dtype) -> bool:
    return isinstance(t, types.Array) and t.dtype == dtype and t.ndim == 1 and t.layout == "C"


def _load_columns(context, builder, tile_ty, tile, col):
    """Load tile[k, col:col+16] for k < 16 and return the 16 transposed vectors.

    Column vector i holds element ``col + i`` of every lane. The transpose is the classic
    log2(16)-stage exchange network: at distance d, rows i and i+d swap their d-blocks.
    """
    arr = context.make_array(tile_ty)(context, builder, tile)
    width = builder.extract_value(arr.shape, 1)
    rows = []
    for k in range(LANES):
        off = builder.add(builder.mul(width, ir.Constant(_I64, k)), col)
        ptr = builder.bitcast(builder.gep(arr.data, [off]), _V16F.as_pointer())
        rows.append(builder.load(ptr, align=4))
    d = LANES // 2
    while d >= 1:
        nxt = list(rows)
        for i in range(LANES):
            if i & d:
                continue
            j = i + d
            lo = [c if not c & d else LANES + c - d for c in range(LANES)]
            hi = [c + d if not c & d else LANES + c for c in range(LANES)]
            nxt[i] = builder.shuffle_vector(rows[i], rows[j], ir.Constant(_V16I, lo))
            nxt[j] = builder.shuffle_vector(rows[i], rows[j], ir.Constant(_V16I, hi))
        rows = nxt
        d //= 2
    return rows


def _vec_ptr(context, builder, arr_ty, arr, offset, vty):
    a = context.make_array(arr_ty)(context, builder, arr)
    return builder.bitcast(builder.gep(a.data, [ir.Constant(_I64, offset)]), vty.as_pointer())


@intrinsic
def sign_sums16(typingctx, tile, col, sums, counts):
    """Per lane k, in column order: sums[k] += v if v >= 0, sums[16+k] += v if not; counts[k] += v >= 0.

    ``sums`` is float64[32], ``counts`` int32[16]; v is each tile value widened to float64 (exact).
    The not-taken side adds +0.0, which leaves an IEEE sum unchanged (a sum of non-negatives, or of
    negatives, is never -0.0), so each lane equals ``if v >= 0: sp += v else: sn += v`` run alone.
    """
    if not (_tile_ok(tile) and isinstance(col, types.Integer) and _vec_ok(sums, types.float64)
            and _vec_ok(counts, types.int32)):
        return None
    sig = types.void(tile, types.intp, sums, counts)

    def codegen(context, builder, signature, args):
        t_ty, _, s_ty, c_ty = signature.args
        tile_v, col_v, sums_v, counts_v = args
        cols = _load_columns(context, builder, t_ty, tile_v, col_v)
        ptrs = [_vec_ptr(context, builder, s_ty, sums_v, 8 * q, _V8D) for q in range(4)]
        acc = [builder.load(p, align=8) for p in ptrs]  # pos lo, pos hi, neg lo, neg hi
        cptr = _vec_ptr(context, builder, c_ty, counts_v, 0, _V16I)
        cnt = builder.load(cptr, align=4)
        zero_d = ir.Constant(_V8D, None)
        zero_f = ir.Constant(_V16F, None)
        for v in cols:
            cnt = builder.add(cnt, builder.zext(builder.fcmp_ordered(">=", v, zero_f), _V16I))
            for h, mask in enumerate(_HALVES):
                part = builder.fpext(builder.shuffle_vector(v, v, mask), _V8D)
                ge = builder.fcmp_ordered(">=", part, zero_d)
                acc[h] = builder.fadd(acc[h], builder.select(ge, part, zero_d))
                acc[2 + h] = builder.fadd(acc[2 + h], builder.select(ge, zero_d, part))
        for p, a in zip(ptrs, acc, strict=True):
            builder.store(a, p, align=8)
        builder.store(cnt, cptr, align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def sumsq16(typingctx, tile, col, sums):
    """Per lane k, in column order: sums[k] += float64(v) * float64(v) (``sums`` is float64[16])."""
    if not (_tile_ok(tile) and isinstance(col, types.Integer) and _vec_ok(sums, types.float64)):
        return None
    sig = types.void(tile, types.intp, sums)

    def codegen(context, builder, signature, args):
        t_ty, _, s_ty = signature.args
        tile_v, col_v, sums_v = args
        cols = _load_columns(context, builder, t_ty, tile_v, col_v)
        ptrs = [_vec_ptr(context, builder, s_ty, sums_v, 8 * q, _V8D) for q in range(2)]
        acc = [builder.load(p, align=8) for p in ptrs]
        for v in cols:
            for h, mask in enumerate(_HALVES):
                part = builder.fpext(builder.shuffle_vector(v, v, mask), _V8D)
                acc[h] = builder.fadd(acc[h], builder.fmul(part, part))
        for p, a in zip(ptrs, acc, strict=True):
            builder.store(a, p, align=8)
        return context.get_dummy_value()

    return sig, codegen
