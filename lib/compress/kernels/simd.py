"""Explicit SIMD (LLVM IR through numba's ``@intrinsic``) where the auto-vectorizer falls short.

Mainly one pattern it cannot find: many sequential sums at once. Also TernGrad's code computation,
which is bound by division and multiplies: written as 512-bit vector steps because LLVM's
auto-vectorizer settles for 256-bit ones on this CPU.

The frozen formats fix how a scale is summed: in float64, element after element, one chunk (or
bucket) at a time. Each chunk's sum is a chain of dependent adds (4 cycles each), so a plain loop
runs at a quarter of an element per cycle, whatever the compiler does, and reassociating it would
change the bytes. What is allowed is to run 16 chunks' chains side by side, one chunk per SIMD lane:
the sums are bit-identical to 16 separate loops. That needs a transpose (lane k must see element i
of chunk k), which auto-vectorizers do not produce, so it is written here in LLVM IR through numba's
``@intrinsic``: plain, target-independent IR (vector loads, ``shufflevector``, ``fadd``), lowered by
numba's own LLVM to AVX-512 / AVX2 / NEON as the machine has. No C compiler is involved.

The sum intrinsics consume 16 consecutive elements of 16 rows (one row per lane) per call: either
from a float32 C-contiguous 2-D *tile* that the caller filled (zero-padded where a lane has no
element: +0.0 leaves every sum unchanged), or, in the ``*_direct`` variants, straight from the
arrays at a row stride, where the caller guarantees that all 16 rows exist. No bounds are checked
here.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .common import FMAX

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


def _transpose(builder, rows):
    """The 16 columns of 16 rows: column i holds element i of every row.

    The classic log2(16)-stage exchange network: at distance d, rows i and i+d swap their d-blocks
    (64 two-source shuffles for 256 elements).
    """
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


def _row_ptr(builder, data, off, k_times):
    return builder.bitcast(builder.gep(data, [builder.add(off, k_times)]), _V16F.as_pointer())


def _load_columns(context, builder, tile_ty, tile, col):
    """The 16 transposed columns of tile[0:16, col:col+16]."""
    arr = context.make_array(tile_ty)(context, builder, tile)
    width = builder.extract_value(arr.shape, 1)
    rows = [
        builder.load(_row_ptr(builder, arr.data, col, builder.mul(width, ir.Constant(_I64, k))), align=4)
        for k in range(LANES)
    ]
    return _transpose(builder, rows)


PREFETCH_AHEAD = 2 * LANES  # elements: software prefetch distance of the row loads (2 steps, 128 B)


def _prefetch_rows(builder, data, off, offs):
    """Prefetch (read, keep in all cache levels) the cache line of each row at ``off``.

    onebit's sums pass reads 16 rows of the gradient and 16 of the residual, 256 KiB apart, and
    stores 16: more streams than the hardware prefetchers follow, so without this the row loads
    wait on DRAM latency. Distances tried on a 2-core EPYC (a step is 16 elements, one line):
    1 or 2 steps best (onebit encode about 1.2x faster than without), 4 less; 8 and 16 slower
    than none (32 rows that far ahead fill L1). A write hint on r's rows was slower. A prefetch is
    only a hint: it never faults, even past the end of an array, and cannot change a result.
    """
    i8p = ir.IntType(8).as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
    args = (ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1))
    for kk in offs:
        ptr = builder.bitcast(builder.gep(data, [builder.add(off, kk)]), i8p)
        builder.call(fn, [ptr, *args])


def _load_rows_sum(context, builder, x_ty, x, r_ty, r, off, stride, prefetch=False):
    """Rows k = x[off + k*stride : +16] (+ r[...], the sum stored back into r), transposed.

    All loads are issued before any store: rows are a multiple of 4 KiB apart, and a load that
    follows a store with the same low 12 address bits stalls (4K aliasing) on x86. With
    ``prefetch``, each row's line ``PREFETCH_AHEAD`` elements on is requested first.
    """
    xa = context.make_array(x_ty)(context, builder, x)
    offs = [builder.mul(stride, ir.Constant(_I64, k)) for k in range(LANES)]
    ahead = builder.add(off, ir.Constant(_I64, PREFETCH_AHEAD)) if prefetch else None
    if prefetch:
        _prefetch_rows(builder, xa.data, ahead, offs)
    rows = [builder.load(_row_ptr(builder, xa.data, off, kk), align=4) for kk in offs]
    if r_ty is not None:
        ra = context.make_array(r_ty)(context, builder, r)
        if prefetch:
            _prefetch_rows(builder, ra.data, ahead, offs)
        rptrs = [_row_ptr(builder, ra.data, off, kk) for kk in offs]
        rs = [builder.load(p, align=4) for p in rptrs]
        rows = [builder.fadd(a, b) for a, b in zip(rows, rs, strict=True)]
        for p, v in zip(rptrs, rows, strict=True):
            builder.store(v, p, align=4)
    return _transpose(builder, rows)


def _vec_ptr(context, builder, arr_ty, arr, offset, vty):
    a = context.make_array(arr_ty)(context, builder, arr)
    return builder.bitcast(builder.gep(a.data, [ir.Constant(_I64, offset)]), vty.as_pointer())


def _accumulate_signs(context, builder, cols, sums_ty, sums, count_ty, count):
    """Per lane, in column order: if v >= 0 then sp += v else sn += v (float64); count += v >= 0.

    Written as ``select(ge, sp + v, sp)``, which AVX-512 executes as one masked add: exactly the
    sequential ``if``, NaN going to the negative side as there.
    """
    ptrs = [_vec_ptr(context, builder, sums_ty, sums, 8 * q, _V8D) for q in range(4)]
    acc = [builder.load(p, align=8) for p in ptrs]  # pos lo, pos hi, neg lo, neg hi
    cptr = _vec_ptr(context, builder, count_ty, count, 0, _I64)
    cnt = builder.load(cptr, align=8)
    zero_f = ir.Constant(_V16F, None)
    for v in cols:
        ge16 = builder.fcmp_ordered(">=", v, zero_f)
        bits = builder.bitcast(ge16, ir.IntType(LANES))
        cnt = builder.add(cnt, builder.zext(builder.ctpop(bits), _I64))
        for h, mask in enumerate(_HALVES):
            part = builder.fpext(builder.shuffle_vector(v, v, mask), _V8D)
            ge = builder.shuffle_vector(ge16, ge16, mask)
            acc[h] = builder.select(ge, builder.fadd(acc[h], part), acc[h])
            acc[2 + h] = builder.select(ge, acc[2 + h], builder.fadd(acc[2 + h], part))
    for p, a in zip(ptrs, acc, strict=True):
        builder.store(a, p, align=8)
    builder.store(cnt, cptr, align=8)


def _sums_ok(sums, count) -> bool:
    return _vec_ok(sums, types.float64) and _vec_ok(count, types.int64)


@intrinsic
def sign_sums16(typingctx, tile, col, sums, count):
    """Lanes = the 16 tile rows, columns col..col+15 in order: sums[k] (k < 16) accumulates the
    v >= 0 of row k, sums[16 + k] the others (float64); count[0] += how many v >= 0 (int64).
    """
    if not (_tile_ok(tile) and isinstance(col, types.Integer) and _sums_ok(sums, count)):
        return None
    sig = types.void(tile, types.intp, sums, count)

    def codegen(context, builder, signature, args):
        t_ty, _, s_ty, c_ty = signature.args
        cols = _load_columns(context, builder, t_ty, args[0], args[1])
        _accumulate_signs(context, builder, cols, s_ty, args[2], c_ty, args[3])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def sign_sums16_direct(typingctx, x, r, off, stride, sums, count):
    """As ``sign_sums16`` with lane k reading v = x[off + k*stride + i] + r[...] straight from the
    arrays (and storing v into r); ``r`` may be None (v = x). The caller guarantees that all 16
    rows of 16 elements exist: full groups of chunks, no padding needed.
    """
    no_r = isinstance(r, types.NoneType)
    if not (_vec_ok(x, types.float32) and (no_r or _vec_ok(r, types.float32)) and _sums_ok(sums, count)
            and isinstance(off, types.Integer) and isinstance(stride, types.Integer)):
        return None
    sig = types.void(x, r, types.intp, types.intp, sums, count)

    def codegen(context, builder, signature, args):
        x_ty, r_ty, _, _, s_ty, c_ty = signature.args
        r_arg = None if no_r else r_ty
        cols = _load_rows_sum(context, builder, x_ty, args[0], r_arg, args[1], args[2], args[3], prefetch=True)
        _accumulate_signs(context, builder, cols, s_ty, args[4], c_ty, args[5])
        return context.get_dummy_value()

    return sig, codegen


def _accumulate_squares(context, builder, cols, sums_ty, sums):
    ptrs = [_vec_ptr(context, builder, sums_ty, sums, 8 * q, _V8D) for q in range(2)]
    acc = [builder.load(p, align=8) for p in ptrs]
    for v in cols:
        for h, mask in enumerate(_HALVES):
            part = builder.fpext(builder.shuffle_vector(v, v, mask), _V8D)
            acc[h] = builder.fadd(acc[h], builder.fmul(part, part))
    for p, a in zip(ptrs, acc, strict=True):
        builder.store(a, p, align=8)


@intrinsic
def sumsq16(typingctx, tile, col, sums):
    """Per lane k, in column order: sums[k] += float64(v) * float64(v) (``sums`` is float64[16]).

    No fused multiply-add: the product is rounded, then added, as a plain loop does.
    """
    if not (_tile_ok(tile) and isinstance(col, types.Integer) and _vec_ok(sums, types.float64)):
        return None
    sig = types.void(tile, types.intp, sums)

    def codegen(context, builder, signature, args):
        t_ty, _, s_ty = signature.args
        cols = _load_columns(context, builder, t_ty, args[0], args[1])
        _accumulate_squares(context, builder, cols, s_ty, args[2])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def sumsq16_direct(typingctx, x, off, stride, sums):
    """As ``sumsq16`` with lane k reading x[off + k*stride + i] straight from the array."""
    if not (_vec_ok(x, types.float32) and isinstance(off, types.Integer) and isinstance(stride, types.Integer)
            and _vec_ok(sums, types.float64)):
        return None
    sig = types.void(x, types.intp, types.intp, sums)

    def codegen(context, builder, signature, args):
        x_ty, _, _, s_ty = signature.args
        cols = _load_rows_sum(context, builder, x_ty, args[0], None, None, args[1], args[2])
        _accumulate_squares(context, builder, cols, s_ty, args[3])
        return context.get_dummy_value()

    return sig, codegen


# ---------------------------------------------------------------------------- linear quantization
_GOLDEN = 0x9E3779B9


def _splat(builder, value, ty, lanes=LANES):
    """``value`` (of type ``ty``) in every one of ``lanes`` lanes."""
    undef = ir.Constant(ir.VectorType(ty, lanes), ir.Undefined)
    v = builder.insert_element(undef, value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, undef, ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes))


def _vconst(ty, value):
    return ir.Constant(ir.VectorType(ty, LANES), [value] * LANES)


def _floor16(builder, v):
    name = "llvm.floor.v16f32"
    fn = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(_V16F, [_V16F]), name)
    return builder.call(fn, [v])


def _make_linear_codes16(stochastic: bool):
    """16 codes q = clip(floor((g - lo) / gap + u), 0, qmax) in one explicit 512-bit step.

    The same IEEE float32 operations, in the same order, as ``quantize._linear_codes_*``; written as
    vector IR because LLVM's auto-vectorizer picks 256-bit vectors, and this loop is bound by the
    divider and the hash's multiplies, not by memory: 16 lanes per instruction do 1.3x the work.
    u = uniform01(seed, i) comes from ``ctr``, the counter of the first element (lane k: ctr + k*golden).
    """

    @intrinsic
    def linear_codes16(typingctx, g, off, lo, gap, qmax, ctr, codes, coff):
        if not (_vec_ok(g, types.float32) and _vec_ok(codes, types.uint8)):
            return None
        sig = types.void(g, types.intp, types.float32, types.float32, types.int32, types.uint32, codes, types.intp)

        def codegen(context, builder, signature, args):
            ga = context.make_array(signature.args[0])(context, builder, args[0])
            ca = context.make_array(signature.args[6])(context, builder, args[6])
            gv = builder.load(builder.bitcast(builder.gep(ga.data, [args[1]]), _V16F.as_pointer()), align=4)
            y = builder.fdiv(builder.fsub(gv, _splat(builder, args[2], _F32)), _splat(builder, args[3], _F32))
            if stochastic:
                lanes = ir.Constant(_V16I, [(k * _GOLDEN) & 0xFFFFFFFF for k in range(LANES)])
                x = builder.add(_splat(builder, args[5], _I32), lanes)
                x = builder.xor(x, builder.lshr(x, _vconst(_I32, 16)))
                x = builder.mul(x, _vconst(_I32, 0x7FEB352D))
                x = builder.xor(x, builder.lshr(x, _vconst(_I32, 15)))
                x = builder.mul(x, _vconst(_I32, 0x846CA68B))
                x = builder.xor(x, builder.lshr(x, _vconst(_I32, 16)))
                u = builder.fmul(builder.sitofp(builder.lshr(x, _vconst(_I32, 8)), _V16F), _vconst(_F32, 2.0**-24))
            else:
                u = _vconst(_F32, 0.5)
            q = builder.fptosi(_floor16(builder, builder.fadd(y, u)), _V16I)
            qm = _splat(builder, args[4], _I32)
            q = builder.select(builder.icmp_signed("<", qm, q), qm, q)  # min(qmax, q)
            zero = _vconst(_I32, 0)
            q = builder.select(builder.icmp_signed("<", q, zero), zero, q)  # max(0, .)
            out = builder.bitcast(builder.gep(ca.data, [args[7]]), ir.VectorType(ir.IntType(8), LANES).as_pointer())
            builder.store(builder.trunc(q, ir.VectorType(ir.IntType(8), LANES)), out, align=1)
            return context.get_dummy_value()

        return sig, codegen

    return linear_codes16


linear_codes16_stochastic = _make_linear_codes16(True)
linear_codes16_nearest = _make_linear_codes16(False)


# ---------------------------------------------------------------------------- 8 lanes, per block
# The per-block rules (adaptive TBQ, onebit in blocks) sum in 8 fixed lanes, element i of a block in
# lane i % 8, each lane sequential (an order the CUDA kernel repeats). numba compiles the 8 lanes
# written out as scalars to one scalar add per element: LLVM's SLP vectorizer never merges them. Here
# they are one <8 x double> accumulator, stepped over 8 elements at a time by ``_lane_loop8``.
_V8F = ir.VectorType(_F32, 8)
_V8I32 = ir.VectorType(_I32, 8)
_V8L = ir.VectorType(_I64, 8)
_V8B = ir.VectorType(ir.IntType(1), 8)
_ZERO_V8D = ir.Constant(_V8D, [0.0] * 8)
_ZERO_V8L = ir.Constant(_V8L, [0] * 8)


def _load8(builder, data, i):
    """The 8 float32 at data[i : i + 8] as one vector (unaligned)."""
    return builder.load(builder.bitcast(builder.gep(data, [i]), _V8F.as_pointer()), align=4)


_FMAX_V8F = ir.Constant(_V8F, [float(FMAX)] * 8)
_ABS_V8I32 = ir.Constant(_V8I32, [0x7FFFFFFF] * 8)


def _abs8(builder, v):
    """|v| per lane: the sign bit cleared (what ``abs`` of a float32 is, NaN and -0.0 included)."""
    return builder.bitcast(builder.and_(builder.bitcast(v, _V8I32), _ABS_V8I32), _V8F)


def _lane_loop8(builder, name, full, inits, step):
    """Emit ``for i in range(0, full, 8): accs = step(i, accs)`` and return the final ``accs`` (the
    ``inits`` when ``full <= 0``).

    The accumulators stay in registers (phi nodes), one vector step per 8 elements: the loop shape
    every 8-lane sum here shares; ``step(i, accs)`` emits one step's IR and returns the new values.
    """
    zero = ir.Constant(full.type, 0)
    entry = builder.basic_block
    loop = builder.append_basic_block(f"{name}.loop")
    done = builder.append_basic_block(f"{name}.done")
    builder.cbranch(builder.icmp_signed(">", full, zero), loop, done)

    builder.position_at_end(loop)
    i = builder.phi(full.type)
    i.add_incoming(zero, entry)
    accs = []
    for init in inits:
        acc = builder.phi(init.type)
        acc.add_incoming(init, entry)
        accs.append(acc)
    nxt = step(i, accs)
    i_n = builder.add(i, ir.Constant(full.type, 8))
    end = builder.basic_block
    i.add_incoming(i_n, end)
    for acc, v in zip(accs, nxt, strict=True):
        acc.add_incoming(v, end)
    builder.cbranch(builder.icmp_signed("<", i_n, full), loop, done)

    builder.position_at_end(done)
    return _merge(builder, inits, entry, nxt, end)


def _merge(builder, a, a_block, b, b_block):
    """One phi a value, for values ``a`` coming from block ``a_block`` and ``b`` from ``b_block``."""
    out = []
    for x, y in zip(a, b, strict=True):
        phi = builder.phi(x.type)
        phi.add_incoming(x, a_block)
        phi.add_incoming(y, b_block)
        out.append(phi)
    return out


def _tail_index8(builder, full, last, k):
    """min(full + k, last): lane k of the ragged tail, clamped to the block's last element."""
    idx = builder.add(full, ir.Constant(full.type, k))
    return builder.select(builder.icmp_signed("<", idx, last), idx, last)


def _gather_tail8(builder, data, full, last):
    """Lanes k: data[min(full + k, last)] (scalar loads: the tail of a block holds fewer than 8)."""
    vec = ir.Constant(_V8F, ir.Undefined)
    for k in range(8):
        x = builder.load(builder.gep(data, [_tail_index8(builder, full, last, k)]), align=4)
        vec = builder.insert_element(vec, x, ir.Constant(_I32, k))
    return vec


def _scatter_tail8(builder, vec, data, full, last):
    """data[min(full + k, last)] = lane k. Lanes past the tail land on ``last`` with the value lane
    ``last - full`` stores there (they gathered the same element): every store writes the right value."""
    for k in range(8):
        builder.store(builder.extract_element(vec, ir.Constant(_I32, k)),
                      builder.gep(data, [_tail_index8(builder, full, last, k)]), align=4)


class _BlockShape:
    """A block of ``m`` > 0 elements as ``full`` elements of whole 8-element steps and a ragged tail of
    ``t`` < 8 (only a gradient's last block has one), which runs as one step of lanes 0 .. t-1
    (``in_tail``) over clamped gathers."""

    def __init__(self, builder, m):
        self.builder = builder
        seven = ir.Constant(m.type, 7)
        self.m64 = builder.sext(m, _I64) if m.type != _I64 else m
        self.full = builder.and_(m, ir.Constant(m.type, ~7))
        self.t = builder.and_(m, seven)
        self.last = builder.sub(m, ir.Constant(m.type, 1))
        t64 = builder.sext(self.t, _I64) if self.t.type != _I64 else self.t
        self.in_tail = builder.icmp_signed("<", ir.Constant(_V8L, list(range(8))), _splat(builder, t64, _I64, 8))

    def gather(self, data):
        return _gather_tail8(self.builder, data, self.full, self.last)

    def scatter(self, vec, data):
        _scatter_tail8(self.builder, vec, data, self.full, self.last)

    def tail(self, accs, emit):
        """``emit()``'s new accumulators where the block has a tail, else ``accs`` (phi-merged)."""
        builder = self.builder
        before = builder.basic_block
        with builder.if_then(builder.icmp_signed(">", self.t, ir.Constant(self.t.type, 0)), likely=False):
            new = emit()
            end = builder.basic_block
        return _merge(builder, accs, before, new, end)


def _block_operands(context, builder, signature, args, out_arg, shift):
    """What both block encoders read from their arguments ``(g, r, use_r, j0, m, ..., out)``: pointers to
    ``g[j0]``, ``r[j0]`` and the output byte holding element ``j0`` (``j0 >> shift``: 3 for onebit's 8
    elements a byte, 2 for tbq's 4), ``use_r`` as an LLVM bool and the block's ``_BlockShape``."""
    j0, m = args[3], args[4]
    g_ty, r_ty, b_ty = signature.args[0], signature.args[1], signature.args[out_arg]
    gd = builder.gep(context.make_array(g_ty)(context, builder, args[0]).data, [j0])
    rd = builder.gep(context.make_array(r_ty)(context, builder, args[1]).data, [j0])
    byte0 = builder.ashr(j0, ir.Constant(j0.type, shift))
    bd = builder.gep(context.make_array(b_ty)(context, builder, args[out_arg]).data, [byte0])
    use_r = context.cast(builder, args[2], types.boolean, types.boolean)
    return gd, rd, bd, use_r, _BlockShape(builder, m)


def _pairwise8(builder, vec, add):
    """((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) of an 8-lane vector, in that order."""
    def half(v, n):
        even = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, n), list(range(0, 2 * n, 2))))
        odd = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, n), list(range(1, 2 * n, 2))))
        return add(even, odd)

    pairs = half(half(vec, 4), 2)
    first, second = (builder.extract_element(pairs, ir.Constant(_I32, k)) for k in range(2))
    return add(first, second)


def _mean32(builder, total, count):
    """float32(total / count), 0.0 when count is 0 (total float64, count int64)."""
    mean = builder.fptrunc(builder.fdiv(total, builder.sitofp(count, _F64)), _F32)
    return builder.select(builder.icmp_signed(">", count, ir.Constant(_I64, 0)), mean, ir.Constant(_F32, 0.0))


@intrinsic
def onebit_block8(typingctx, g, r, use_r, j0, m, bits):
    """One onebit block, elements j0 .. j0 + m - 1 (j0 a multiple of 8, m > 0): returns (pos, neg,
    bad), the float32 means of v >= 0 and of v < 0 (0.0 for an empty class) and 1 (uint8) if some v
    was Inf or NaN; writes the block's bits into ``bits`` (bit 1 where v >= 0, element i at bit i % 8
    of byte i // 8, zero past the block), and with ``use_r`` r <- v - (pos if v >= 0 else neg).
    v = g + r if ``use_r`` else g (pass g again as r when there is none: it is then only read).

    The format's order, bit for bit: float64 sums in 8 lanes (element i of the block in lane i % 8,
    each lane in element order, NaN on the negative side as a scalar ``if`` sends it), the ragged
    tail of a gradient's last block in lanes 0 .. t-1, the lanes added as ((0+1)+(2+3))+((4+5)+(6+7)).
    Written as vector IR because numba compiled the 8 lanes to one scalar add per element (the
    compiler never merges them), and with the whole block here (the v pass, the sums, the means, the
    residual and the bits, 8 bits per vector compare, no codes buffer) because at 32 elements a
    block's scalar bookkeeping cost as much as its sums. No bounds are checked here.
    """
    if not (_vec_ok(g, types.float32) and _vec_ok(r, types.float32) and isinstance(use_r, types.Boolean)
            and isinstance(j0, types.Integer) and isinstance(m, types.Integer) and _vec_ok(bits, types.uint8)):
        return None
    sig = types.Tuple((types.float32, types.float32, types.uint8))(g, r, types.boolean, types.intp, types.intp, bits)

    def codegen(context, builder, signature, args):
        gd, rd, bd, use_r, blk = _block_operands(context, builder, signature, args, 5, 3)
        zero_f = ir.Constant(_V8F, [0.0] * 8)

        def sums(x, accs, mask=None):
            """One step of the lanes: the sums and count of x >= 0, of the others, the bad flags."""
            pos, neg, cnt, bad = accs
            ge = builder.fcmp_ordered(">=", x, zero_f)
            lt = builder.not_(ge)
            if mask is not None:
                ge, lt = builder.and_(ge, mask), builder.and_(lt, mask)
            wide = builder.fpext(x, _V8D)
            return (builder.select(ge, builder.fadd(pos, wide), pos),
                    builder.select(lt, builder.fadd(neg, wide), neg),
                    builder.add(cnt, builder.zext(ge, _V8L)),
                    builder.or_(bad, builder.fcmp_unordered(">", _abs8(builder, x), _FMAX_V8F)))

        def v_step(i, accs):  # pass 1: v = g (+ r), r <- v, the lanes
            gv = _load8(builder, gd, i)
            rp = builder.bitcast(builder.gep(rd, [i]), _V8F.as_pointer())
            x = builder.select(use_r, builder.fadd(gv, builder.load(rp, align=4)), gv)
            with builder.if_then(use_r, likely=True):
                builder.store(x, rp, align=4)
            return sums(x, accs)

        def v_tail(accs):
            gt = blk.gather(gd)
            x = builder.select(use_r, builder.fadd(gt, blk.gather(rd)), gt)
            with builder.if_then(use_r):
                blk.scatter(x, rd)
            return sums(x, accs, blk.in_tail)

        inits = [_ZERO_V8D, _ZERO_V8D, _ZERO_V8L, ir.Constant(_V8B, [0] * 8)]
        accs = _lane_loop8(builder, "onebit_block8.v", blk.full, inits, v_step)
        pos_l, neg_l, cnt_l, bad_l = blk.tail(accs, lambda: v_tail(accs))

        cp = _pairwise8(builder, cnt_l, builder.add)
        pos = _mean32(builder, _pairwise8(builder, pos_l, builder.fadd), cp)
        neg = _mean32(builder, _pairwise8(builder, neg_l, builder.fadd), builder.sub(blk.m64, cp))
        pos_v, neg_v = _splat(builder, pos, _F32, 8), _splat(builder, neg, _F32, 8)

        def bits_of(x, mask=None):  # pass 2 per step: x is v; r <- v - scale; the 8 bits as one byte
            ge = builder.fcmp_ordered(">=", x, zero_f)
            res = builder.fsub(x, builder.select(ge, pos_v, neg_v))
            if mask is not None:
                ge = builder.and_(ge, mask)
            return res, builder.bitcast(ge, ir.IntType(8))

        def code_step(i, accs):
            rp = builder.bitcast(builder.gep(rd, [i]), _V8F.as_pointer())
            res, byte = bits_of(builder.load(rp, align=4))  # r holds v (or is g)
            with builder.if_then(use_r, likely=True):
                builder.store(res, rp, align=4)
            builder.store(byte, builder.gep(bd, [builder.ashr(i, ir.Constant(i.type, 3))]), align=1)
            return accs

        def code_tail():
            res, byte = bits_of(blk.gather(rd), blk.in_tail)
            with builder.if_then(use_r):
                blk.scatter(res, rd)
            builder.store(byte, builder.gep(bd, [builder.ashr(blk.full, ir.Constant(blk.full.type, 3))]), align=1)
            return []

        _lane_loop8(builder, "onebit_block8.bits", blk.full, [], code_step)
        blk.tail([], code_tail)

        any_bad = builder.icmp_unsigned("!=", builder.bitcast(bad_l, ir.IntType(8)), ir.Constant(ir.IntType(8), 0))
        return context.make_tuple(builder, signature.return_type, [pos, neg, builder.zext(any_bad, ir.IntType(8))])

    return sig, codegen


_V8I16 = ir.VectorType(ir.IntType(16), 8)
_CODE_SHIFTS = ir.Constant(_V8I16, [2 * k for k in range(8)])


@intrinsic
def tbq_block8(typingctx, g, r, use_r, j0, m, scale, body):
    """One adaptive-TBQ block, elements j0 .. j0 + m - 1 (j0 a multiple of 8, m > 0): returns
    (value, bad), the block's float32 value and 1 (uint8) if some v was Inf or NaN; writes the
    block's 2-bit codes into ``body`` (2 / 0 / 1 for v >= tau / v <= -tau / else, element i at bits
    2 (i % 4) of byte i // 4, zero past the block) and with ``use_r`` r <- v - (code - 1) * value.
    v = g + r if ``use_r`` else g (pass g again as r when there is none: it is then only read).

    The rule of ``algorithms.tbq``, bit for bit: tau = float32(scale * (sum|v| / m)), value = float32
    (sum of |v| >= tau / their count), both sums float64 in 8 lanes (element i of the block in lane
    i % 8, each lane in element order, NaN never counted), the ragged tail of a gradient's last block
    in lanes 0 .. t-1, the lanes added as ((0+1)+(2+3))+((4+5)+(6+7)); tau = value = 1 where tau is
    not a positive finite float32, value = tau where the mean is not in [tau, FMAX]. Written as vector
    IR for the reasons of ``onebit_block8``. No bounds are checked here.
    """
    if not (_vec_ok(g, types.float32) and _vec_ok(r, types.float32) and isinstance(use_r, types.Boolean)
            and isinstance(j0, types.Integer) and isinstance(m, types.Integer) and isinstance(scale, types.Float)
            and _vec_ok(body, types.uint8)):
        return None
    sig = types.Tuple((types.float32, types.uint8))(g, r, types.boolean, types.intp, types.intp, types.float64, body)

    def codegen(context, builder, signature, args):
        scale = args[5]
        gd, rd, bd, use_r, blk = _block_operands(context, builder, signature, args, 6, 2)

        def v8(gv, rv):
            return builder.select(use_r, builder.fadd(gv, rv), gv)

        def abs_sums(tau):
            """(sum of |v| >= tau, count): the lanes over the whole steps and the tail, added."""
            tau_v = _splat(builder, tau, _F32, 8)

            def lanes(x, accs, mask=None):
                acc, cnt = accs
                mag = _abs8(builder, x)
                hit = builder.fcmp_ordered(">=", mag, tau_v)
                if mask is not None:
                    hit = builder.and_(hit, mask)
                return (builder.select(hit, builder.fadd(acc, builder.fpext(mag, _V8D)), acc),
                        builder.add(cnt, builder.zext(hit, _V8L)))

            def step(i, accs):
                return lanes(v8(_load8(builder, gd, i), _load8(builder, rd, i)), accs)

            accs = _lane_loop8(builder, "tbq_block8.sums", blk.full, [_ZERO_V8D, _ZERO_V8L], step)
            acc, cnt = blk.tail(accs, lambda: lanes(v8(blk.gather(gd), blk.gather(rd)), accs, blk.in_tail))
            return _pairwise8(builder, acc, builder.fadd), _pairwise8(builder, cnt, builder.add)

        fmax = ir.Constant(_F32, float(FMAX))
        one = ir.Constant(_F32, 1.0)
        total, _ = abs_sums(ir.Constant(_F32, 0.0))
        tau = builder.fptrunc(builder.fmul(scale, builder.fdiv(total, builder.sitofp(blk.m64, _F64))), _F32)
        tau_ok = builder.and_(builder.fcmp_ordered(">", tau, ir.Constant(_F32, 0.0)),
                              builder.fcmp_ordered("<=", tau, fmax))
        above, count = abs_sums(tau)
        mean = builder.fptrunc(builder.fdiv(above, builder.sitofp(count, _F64)), _F32)
        value = builder.select(builder.icmp_signed(">", count, ir.Constant(_I64, 0)), mean, tau)
        value_ok = builder.and_(builder.fcmp_ordered(">=", value, tau), builder.fcmp_ordered("<=", value, fmax))
        value = builder.select(value_ok, value, tau)
        tau = builder.select(tau_ok, tau, one)
        value = builder.select(tau_ok, value, one)

        tau_v = _splat(builder, tau, _F32, 8)
        ntau_v = _splat(builder, builder.fneg(tau), _F32, 8)
        value_v = _splat(builder, value, _F32, 8)
        ones = ir.Constant(_V8F, [1.0] * 8)

        def codes_of(x, mask=None):
            """(r's new values, the 8 codes as 16 bits, bad flags) of one step."""
            ge = builder.fcmp_ordered(">=", x, tau_v)
            le = builder.fcmp_ordered("<=", x, ntau_v)
            q = builder.select(le, builder.fneg(ones), builder.select(ge, ones, ir.Constant(_V8F, [0.0] * 8)))
            res = builder.fsub(x, builder.fmul(q, value_v))
            code = builder.select(le, ir.Constant(_V8I16, [0] * 8),
                                  builder.select(ge, ir.Constant(_V8I16, [2] * 8), ir.Constant(_V8I16, [1] * 8)))
            if mask is not None:
                code = builder.select(mask, code, ir.Constant(_V8I16, [0] * 8))
            packed = _pairwise8(builder, builder.shl(code, _CODE_SHIFTS), builder.or_)
            return res, packed, builder.fcmp_unordered(">", _abs8(builder, x), _FMAX_V8F)

        def code_step(i, accs):
            (bad,) = accs
            rp = builder.bitcast(builder.gep(rd, [i]), _V8F.as_pointer())
            res, packed, nb = codes_of(v8(_load8(builder, gd, i), builder.load(rp, align=4)))
            with builder.if_then(use_r, likely=True):
                builder.store(res, rp, align=4)
            out = builder.bitcast(builder.gep(bd, [builder.ashr(i, ir.Constant(i.type, 2))]),
                                  ir.IntType(16).as_pointer())
            builder.store(packed, out, align=1)
            return [builder.or_(bad, nb)]

        accs = _lane_loop8(builder, "tbq_block8.codes", blk.full, [ir.Constant(_V8B, [0] * 8)], code_step)

        def tail_codes():
            res, packed, nb = codes_of(v8(blk.gather(gd), blk.gather(rd)), blk.in_tail)
            with builder.if_then(use_r):
                blk.scatter(res, rd)
            at = builder.ashr(blk.full, ir.Constant(blk.full.type, 2))
            builder.store(builder.trunc(packed, ir.IntType(8)), builder.gep(bd, [at]), align=1)
            with builder.if_then(builder.icmp_signed(">", blk.t, ir.Constant(blk.t.type, 4))):
                high = builder.trunc(builder.lshr(packed, ir.Constant(ir.IntType(16), 8)), ir.IntType(8))
                builder.store(high, builder.gep(bd, [builder.add(at, ir.Constant(at.type, 1))]), align=1)
            return [builder.or_(accs[0], nb)]

        (bad,) = blk.tail(accs, tail_codes)
        any_bad = builder.icmp_unsigned("!=", builder.bitcast(bad, ir.IntType(8)), ir.Constant(ir.IntType(8), 0))
        return context.make_tuple(builder, signature.return_type, [value, builder.zext(any_bad, ir.IntType(8))])

    return sig, codegen
