"""Row-wise and reducing ops: reductions, softmax / log_softmax (+ backward), layer_norm and
rms_norm (+ backward), group and instance norm, losses (batch norm: batch_norm.py).

Layout: rows (all dims but the reduced last one) spread over the P partitions, `r` rows per
partition side by side on the free axis (context.LowerCtx.row_plan), so a block is [P, r*C].
- Row reductions: `tensor_reduce` on VectorE (N cycles; N/2 for BF16 add/max [ISAcost]).
- Reductions over leading dims: chunks accumulate with `tensor_tensor` adds on VectorE, then the
  P partitions are summed on TensorE against a ones vector (the documented cross-partition
  summation through the PE array [ArchV2]).
- softmax: max (VectorE), exp with bias -max and a fused running sum (ScalarE activation_reduce,
  the sum is free [ISAcost]) per row, then one ScalarE activation per row scaling by 1/sum
  (log_softmax: adding the bias -max - log(sum)); rows shorter than an instruction's minimum
  cost: subtract / exp / reduce / multiply passes over the block, the row statistics read along
  each row (a stride-0 pattern).
- layer/batch norm: `bn_stats` (<= chip.bn_stats_free_elems_max elements a call) + `bn_aggr` per
  row [ISAcost] (rms_norm: the sum of (x / C) * x), then the normalisation as one ScalarE
  activation per row (scale = rstd, bias = -mean*rstd, free); weight and bias one VectorE pass
  each, from one row of them held on every partition."""

from __future__ import annotations

from math import ceil, prod

import ml_dtypes

from ...numerics.formats import itemsize, np_dtype
from ...program.ap import AccessPattern, IndirectPattern, Memory, as_ap
from ..context import BUFS
from .. import reads
from ..registry import lowers
from ..spec import TensorSpec
from .elementwise import TT, elementwise, number, run_recipe, stt
from .movement import index_blocks, index_tile

MAX_ROWS_PER_BLOCK = 8     # rows per partition per block for per-row instructions (bn_stats)


def _rows_cols(x: TensorSpec):
    c = x.shape[-1] if x.ndim else 1
    return max(1, x.numel // max(c, 1)), max(c, 1)


def _pieces(chip, C: int) -> int:
    """Pieces of <= chip.row_piece_elems a row longer than chip.row_whole_max_elems is processed
    in (1: whole rows)."""
    return ceil(C / chip.row_piece_elems) if C > chip.row_whole_max_elems else 1


def row_blocks(ctx, x: TensorSpec, out: TensorSpec, body, *, per_row=False, extra_in=(),
               outs=None, row_in=(), blocks_min=1):
    """Stream x (and extra_in, same layout) in row blocks; body(srcs, dsts, p, r, C, j), srcs
    ending with row_in's tiles: one value per row ([rows] statistics, [p, r] per block).

    Rows longer than chip.row_whole_max_elems do not fit SBUF tiles whole: they run in two
    passes over row pieces of <= chip.row_piece_elems (statistics, then the normalising pass),
    reading x twice from HBM. A per-row statistic output is then stored per piece: k values a
    row, in a tensor k times its size (the pieces' statistics are combined by no instruction).
    `blocks_min`: at least that many blocks (fewer rows each), so loads overlap compute."""
    rows, C = _rows_cols(x)
    outs = outs if outs is not None else [out]
    if C > ctx.chip.row_whole_max_elems:
        k = _pieces(ctx.chip, C)
        piece = lambda t: TensorSpec((rows * k, ceil(C / k)), t.dtype, None, t.id)  # noqa: E731
        stats_pass = lambda srcs, dsts, p, r, c, j: ctx.b.tensor_reduce(  # noqa: E731
            ctx.tmp("pass1", (p, r), "float32", j), srcs[0], "maximum")
        row_blocks(ctx, piece(x), piece(out), stats_pass, outs=[])
        stat = lambda t: TensorSpec((rows * k,), t.dtype, None, t.id)  # noqa: E731
        row_blocks(ctx, piece(x), piece(out), body, per_row=per_row,
                   extra_in=tuple(piece(t) for t in extra_in),
                   outs=[piece(o) if o.numel == out.numel else stat(o) for o in outs],
                   row_in=tuple(stat(t) for t in row_in))
        return
    p, r, total = ctx.row_plan(rows, C, x.dtype)
    per_part = ceil(rows / p)
    if per_row or blocks_min > 1:       # (at least blocks_min blocks: loads overlap compute)
        r = min(r, MAX_ROWS_PER_BLOCK if per_row else r, max(1, per_part // blocks_min))
        total = ceil(per_part / r)
    pending = None
    for j, rj in ctx.emitted(per_part, r, total):     # block j: rows [j*r, j*r + rj)
        srcs = [ctx.load_rows(t, p, r, C, j, role=f"in{i}", rj=rj)
                for i, t in enumerate((x,) + tuple(extra_in))]
        srcs += [ctx.load_rows(t, p, r, 1, j, role=f"row{i}", rj=rj) for i, t in enumerate(row_in)]
        dsts = []
        for i, o in enumerate(outs):
            if o.numel == out.numel:
                dsts.append(ctx.out_tile(o, p, per_part * C, j, rj * C, role=f"out{i}",
                                         off=j * r * C))
            else:   # per-row statistics [rows]
                dsts.append(ctx.tmp(f"stat{i}", (p, rj), "float32", j))
        tail = body(srcs, dsts, p, rj, C, j)
        # software pipelining: a body may return its last stage, emitted after the next
        # block's first stage so the in-order engine queues interleave blocks as a compiler
        # schedules them (no VectorE -> ScalarE -> VectorE round trip per block)
        if pending is not None:
            pending()
        pending = _finish(ctx, tail, outs, out, dsts, p, j, r, rj, C)
    if pending is not None:
        pending()
    ctx.end_op()


def _finish(ctx, tail, outs, out, dsts, p, j, r, rj, C):
    """Block j's last stage and stores: rj rows per partition at row j * r."""
    def run():
        if callable(tail):
            tail()
        for o, d in zip(outs, dsts):
            if o.numel == out.numel:
                ctx.store(o, d, p, j, rj * C, off=j * r * C)
            else:
                ctx.store(o, d, p, j, rj, off=j * r)
    return run


def _ones(ctx, p, dtype):
    """A [p, 1] ones vector for TensorE partition sums, set on the idle GpSimd, which starts it
    at once (a compiler hoists it to the kernel's start)."""
    ones = ctx.tile("ones" if dtype == "float32" else f"ones_{dtype}", (p, 1), dtype, 0)
    ctx.b.memset(ones, 1.0, engine="gpsimd")
    return ones


def _per_row(ctx, dst, src, p, r, C, func="copy", bias=None, scale=1.0, reduce_res=None):
    """One ScalarE activation per row of a [p, r * C] block: a [p, r] bias, scale or reduce_res
    gives each row its own column (a per-partition bias, scale and row sum are free [ISAcost])."""
    def col(v, row):
        return v if v is None or isinstance(v, float) else ctx.cols(v, p, row, 1)
    for row in range(r):
        ctx.b.activation(ctx.cols(dst, p, row * C, C), ctx.cols(src, p, row * C, C), func,
                         bias=col(bias, row), scale=col(scale, row),
                         reduce_res=col(reduce_res, row))


def partition_sum(ctx, acc_ap, p, f, out: TensorSpec, func="copy", scale=1.0, divisor=1):
    """Sum [p, f] over partitions on TensorE against ones: [1, f] in PSUM, copied (through
    ScalarE's func(sum * scale) when that is not the plain copy: a norm's sqrt, a mean's 1/n;
    divided by `divisor` on VectorE: nll_loss's mean) and stored, bank by bank at its own
    offset of out. At most out's elements are summed: a chunk of the flat layout can be wider
    than the output."""
    b = ctx.b
    f = min(f, out.numel)
    ones = _ones(ctx, p, acc_ap.dtype)
    bank = ctx.chip.psum_bank_fp32_elems
    for f0 in range(0, f, bank):
        fn = min(bank, f - f0)
        ps = ctx.tile("psum_red", (1, fn), "float32", f0 // bank, Memory.PSUM)
        b.nc_matmul(ps, ones, ctx.cols(acc_ap, p, f0, fn))
        o = ctx.tile("red_out", (1, fn), out.dtype, f0 // bank)
        if func != "copy" or scale != 1.0:
            b.activation(o, ps, func, scale=scale)
        elif divisor == 1:
            b.tensor_copy(o, ps)
        else:
            b.tensor_scalar(o, ps, "divide", float(divisor))
        ctx.store(out, o, 1, 0, fn, off=f0)


def _reduce_dims(op, x: TensorSpec):
    """The dims `op` reduces: its dim argument (after the order p of the norms), every dim when
    that is None, empty or absent. A bool there is var/std's `unbiased`, not a dim."""
    dims = op.arg(2 if op.op in ("aten::norm", "aten::linalg_vector_norm") else 1)
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = (dims,)
    if not dims or not isinstance(dims, (tuple, list)):
        return tuple(range(x.ndim))
    return tuple(d % max(x.ndim, 1) for d in dims)


_MOMENTS = ("aten::var", "aten::std", "aten::var_mean", "aten::std_mean")
_NORMS = ("aten::norm", "aten::linalg_vector_norm")


def correction(op) -> float:
    """var/std's correction: `unbiased` (a bool after self or after dim: 1 or 0) or the
    `correction` after dim (None: 1), whatever the overload."""
    a = op.arg(1)
    c = a if isinstance(a, bool) else op.arg(2)
    return 1.0 if c is None else float(c)


def leading_prefix(dims, ndim) -> bool:
    """Whether `dims` are the first dims of an ndim tensor (not all of them): the reduced
    rows of a [rows, C] view."""
    return 0 < len(dims) < ndim and dims == tuple(range(len(dims)))


def _moments(ctx, op, src, dsts, p, r, C, j):
    """var/std (and their mean) of each row: the mean, then the squares of x - mean summed per
    row (ScalarE: the bias -mean and the row sum are free; rows shorter than an instruction's
    minimum cost: a whole-block VectorE subtract and multiply), divided by C - correction."""
    b = ctx.b
    s1, nm, ss = (ctx.tmp(k, (p, r), "float32", j) for k in ("s1", "nm", "ss"))
    sq = ctx.tmp("sq", (p, r * C), "float32", j)
    b.tensor_reduce(s1, src, "add")
    b.tensor_scalar(nm, s1, "multiply", -1.0 / C)                  # -mean
    if r == 1 or C >= ctx.chip.min_ii_cycles:
        _per_row(ctx, sq, src, p, r, C, "square", bias=nm, reduce_res=ss)
    else:
        b.tensor_tensor(sq, src, _each_col(nm, p, r, C), "add")
        b.tensor_tensor(sq, sq, sq, "multiply")
        b.tensor_reduce(ss, sq, "add")
    std = op.op in ("aten::std", "aten::std_mean")
    b.tensor_scalar(dsts[0], ss, "divide", C - correction(op), *(("power", 0.5) if std else ()))
    if len(dsts) > 1:
        b.tensor_scalar(dsts[1], nm, "multiply", -1.0)


def _arg_extreme(ctx, op, src, dsts, idx, p, r, C, j):
    """argmax/argmin (max/min.dim: values and indices) of each row: the row's max (min), 1.0
    where x equals it times the column
    index - C (idx, a GpSimd iota), the row's min of that (the first such column, - C) plus C:
    VectorE 3N, ScalarE N (per row one scalar_tensor_tensor (x == max) * idx and a ScalarE
    min; short rows whole-block VectorE passes). (No max-index instruction in the ISA modules:
    VectorE's max8 + nc_find_index8 would take 2N.) A NaN is no row's max here (torch: it is)."""
    b = ctx.b
    ext = dsts[0] if len(dsts) > 1 else ctx.tmp("ext", (p, r), "float32", j)   # max.dim's values
    first = ctx.tmp("first", (p, r), "float32", j)
    b.tensor_reduce(ext, src, "maximum" if op.op in ("aten::argmax", "aten::max") else "minimum")
    hit = ctx.tmp("hit", (p, r * C), "float32", j)
    if r == 1 or C >= ctx.chip.min_ii_cycles:
        for row in range(r):    # (x == ext) * idx on VectorE, its row min on ScalarE
            h = ctx.cols(hit, p, row * C, C)
            stt(ctx, h, ctx.cols(src, p, row * C, C), "equal", ext[0:p, row:row + 1], "multiply",
                ctx.cols(idx, p, row * C, C))
            b.activation(h, h, "copy", reduce_op="minimum", reduce_res=first[0:p, row:row + 1])
    else:
        b.tensor_tensor(hit, src, _each_col(ext, p, r, C), "equal")
        b.tensor_tensor(hit, hit, ctx.cols(idx, p, 0, r * C), "multiply")
        b.tensor_reduce(first, hit, "minimum")
    b.tensor_scalar(dsts[-1], first, "add", float(C))


def _vector_norm(ctx, order, src, dst, p, r, C, j):
    """The order-`order` norm of each row (None: 2): sum(|x|^order)^(1/order) (2: x*x on
    VectorE, others |x| as abs_max(x, 0) then the power, one tensor_scalar), inf / -inf the
    max / min of |x|, 0 the count of nonzeros."""
    b, inf = ctx.b, float("inf")
    order = 2.0 if order is None else float(order)
    t = ctx.tmp("sq", (p, r * C), "float32", j)
    if order == 2:
        b.tensor_tensor(t, src, src, "multiply")
    elif order == 0:
        b.tensor_scalar(t, src, "not_equal", 0.0)
    else:
        b.tensor_scalar(t, src, "abs_max", 0.0, *(() if abs(order) in (1, inf)
                                                  else ("power", order)))
    root = order not in (0, 1, inf, -inf)
    total = ctx.tmp("total", (p, r), "float32", j) if root else dst
    b.tensor_reduce(total, t, "maximum" if order == inf else "minimum" if order == -inf
                    else "add")
    if root:
        b.tensor_scalar(dst, total, "power", 1.0 / order)


def _logsumexp(ctx, src, dsts, p, r, C, j):
    """max + log(sum(exp(x - max))) per row: the max on VectorE, exp(x - max) with its free
    row sum on ScalarE (per row, the bias -max; short rows: a whole-block subtract), the log
    on ScalarE and + max on VectorE."""
    b = ctx.b
    mx, neg, ssum = (ctx.tmp(k, (p, r), "float32", j) for k in ("lmx", "lneg", "lsum"))
    e = ctx.tmp("e", (p, r * C), "float32", j)
    b.tensor_reduce(mx, src, "maximum")
    if r == 1 or C >= ctx.chip.min_ii_cycles:
        b.tensor_scalar(neg, mx, "multiply", -1.0)
        _per_row(ctx, e, src, p, r, C, "exp", bias=neg, reduce_res=ssum)
    else:
        b.tensor_tensor(e, src, _each_col(mx, p, r, C), "subtract")
        b.activation(e, e, "exp")
        b.tensor_reduce(ssum, e, "add")
    b.activation(ssum, ssum, "log")
    b.tensor_tensor(dsts[0], ssum, mx, "add")


def _fold_rows(ctx, src, acc, p, r, C, j):
    """acc[p, C] += the sum of src's r rows of C: a tree of contiguous VectorE adds (2rC
    cycles, as r adds, in log2(r) + 1 instructions)."""
    b, cur, n = ctx.b, src, r
    if n > 1:
        h = n // 2
        cur = ctx.tmp("fold", (p, h * C), "float32", j)
        b.tensor_tensor(cur, ctx.cols(src, p, 0, h * C), ctx.cols(src, p, (n - h) * C, h * C),
                        "add")
        if n % 2:
            b.tensor_tensor(cur[0:p, 0:C], cur[0:p, 0:C], ctx.cols(src, p, h * C, C), "add")
        n = h
        while n > 1:
            h = n // 2
            b.tensor_tensor(ctx.cols(cur, p, 0, h * C), ctx.cols(cur, p, 0, h * C),
                            ctx.cols(cur, p, (n - h) * C, h * C), "add")
            n -= h
    b.tensor_tensor(acc, acc, ctx.cols(cur, p, 0, C), "add")


@lowers("aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min",
        "aten::prod", "aten::norm", "aten::linalg_vector_norm", "aten::var", "aten::std",
        "aten::var_mean", "aten::std_mean", "aten::argmax", "aten::argmin", "aten::logsumexp",
        "aten::all", "aten::any", "aten::count_nonzero", "aten::nansum", "aten::_foreach_norm_one",
        reads=reads.ROWS)
def reduction(ctx, op):
    """Over the last dim: row blocks, each row reduced on VectorE (mean scaled by 1/C, a norm's
    square root, var/std by _moments, argmax/argmin by _arg_extreme). Sum or mean over leading
    dims: the rows of the [rows, C] view on partitions, folded into a [p, C] accumulator
    (_fold_rows), its partitions summed on TensorE. Other dims and the full reduction: the flat
    chunks accumulated on VectorE, the partitions summed on TensorE."""
    x, out = op.inputs[0], op.outputs[0]
    alu = "maximum" if op.op in ("aten::amax", "aten::max", "aten::argmax", "aten::any") else \
        "minimum" if op.op in ("aten::amin", "aten::min", "aten::argmin", "aten::all") else \
        "multiply" if op.op == "aten::prod" else "add"
    squares = op.op in _NORMS or op.op in _MOMENTS
    dims = _reduce_dims(op, x) if x.ndim else ()
    b = ctx.b
    rows, C = (x.numel // max(x.shape[-1], 1), x.shape[-1]) if x.ndim else (1, 1)
    if x.ndim and dims == (x.ndim - 1,) and C > 1 and not (
            x.ndim == 1 and C > ctx.chip.row_whole_max_elems):     # (a long vector: flat)
        arg = op.op in ("aten::argmax", "aten::argmin") or len(op.outputs) == 2 and alu != "add"
        idx = None
        if arg:     # column index - C, once for the widest block
            p, r, _ = ctx.row_plan(rows, C, x.dtype)
            idx = ctx.tile("idx", (p, r * C), "float32", 0)
            b.iota(idx, base=-C, pattern=((0, r), (1, C)))

        def body(srcs, dsts, p, r, C, j):
            src = srcs[0]
            if op.op in _MOMENTS:
                return _moments(ctx, op, src, dsts, p, r, C, j)
            if arg:
                return _arg_extreme(ctx, op, src, dsts, idx, p, r, C, j)
            if op.op == "aten::logsumexp":
                return _logsumexp(ctx, src, dsts, p, r, C, j)
            if op.op in _NORMS:
                return _vector_norm(ctx, op.arg(1), src, dsts[0], p, r, C, j)
            if op.op in ("aten::all", "aten::any", "aten::count_nonzero"):
                nz = ctx.tmp("nz", (p, r * C), "float32", j)
                b.tensor_scalar(nz, src, "not_equal", 0.0)
                src = nz
            if op.op != "aten::mean":
                return b.tensor_reduce(dsts[0], src, alu)
            total = ctx.tmp("total", (p, r), "float32", j)
            b.tensor_reduce(total, src, alu)        # then the mean
            b.tensor_scalar(dsts[0], total, "multiply", 1.0 / C)
        # x as row_blocks' full-size tensor: the outputs ([rows]) are per-row statistics, a
        # [p, r] tile stored per block (with `out` they were taken for [rows, C] outputs and
        # stored C times too large, past their tensor)
        row_blocks(ctx, x, x, body, outs=list(op.outputs))
        return
    scale = 1.0 / max(x.numel // max(out.numel, 1), 1) if op.op == "aten::mean" else 1.0
    C = out.numel
    if alu == "add" and leading_prefix(dims, x.ndim) and C <= ctx.chip.row_whole_max_elems \
            and not squares:
        # the columns of the [rows, C] view: rows on partitions, folded, then TensorE
        view = TensorSpec((x.numel // C, C), x.dtype, None, x.id)
        p = ctx.row_plan(x.numel // C, C, x.dtype)[0]
        acc = ctx.tile("colacc", (p, C), "float32", 0)
        b.memset(acc, 0.0)
        row_blocks(ctx, view, view, lambda srcs, dsts, p, r, C, j: _fold_rows(
            ctx, srcs[0], acc, p, r, C, j), outs=[], blocks_min=4)
        partition_sum(ctx, acc, p, C, out, scale=scale)
        return
    # other dims or the full reduction: accumulate chunks on VectorE, then sum partitions on
    # TensorE
    p, cols, f, chunks = ctx.chunked(x)
    full = len(dims) == x.ndim
    acc = ctx.tile("acc", (p, 1 if full else f), "float32", 0)
    for j, fj in chunks:
        src = ctx.load(x, p, cols, j, fj, off=j * f)
        if squares:
            sq = ctx.tmp("sq", (p, fj), "float32", j)
            b.tensor_tensor(sq, src, src, "multiply")
            src = sq
        if full:
            part = ctx.tmp("part", (p, 1), "float32", j)
            b.tensor_reduce(part, src, alu)
            b.tensor_tensor(acc, acc, part, alu)
        else:
            b.tensor_tensor(acc[0:p, 0:fj], acc[0:p, 0:fj], src, alu)
    partition_sum(ctx, acc, p, acc.shape[1], out, scale=scale)


def _each_col(stat, p, r, C) -> AccessPattern:
    """A [p, r] per-row statistic read as [p, r, C] (stride 0 along each row): one operand for a
    whole block of r rows of C, as an access pattern broadcasts it."""
    a = as_ap(stat)
    return AccessPattern(a.tensor, a.p_start, p, a.offset, ((r, a.dims[-1][1]), (C, 0)))


def _softmax_body(ctx, log, backward):
    b = ctx.b

    def body(srcs, dsts, p, r, C, j):
        x = srcs[0]
        out = dsts[0]
        stat = ctx.tmp("mx", (p, r), "float32", j)
        ssum = ctx.tmp("sum", (p, r), "float32", j)
        if backward:                       # softmax: y * (g - sum(g*y)); inputs (g, y)
            g, y = srcs[0], srcs[1]
            gy = ctx.tmp("gy", (p, r * C), "float32", j)
            if log:                        # g - exp(y) * sum(g)
                b.tensor_reduce(ssum, g, "add")
                b.activation(gy, y, "exp")
                b.tensor_tensor(gy, gy, _each_col(ssum, p, r, C), "multiply")
                b.tensor_tensor(out, g, gy, "subtract")
                return
            b.tensor_tensor(gy, g, y, "multiply")
            b.tensor_reduce(ssum, gy, "add")
            b.tensor_tensor(gy, g, _each_col(ssum, p, r, C), "subtract")
            b.tensor_tensor(out, gy, y, "multiply")
            return
        b.tensor_reduce(stat, x, "maximum")
        e = ctx.tmp("e", (p, r * C), "float32", j)
        per_row = r == 1 or C >= ctx.chip.min_ii_cycles
        if per_row:
            neg = ctx.tmp("negmx", (p, r), "float32", j)
            b.tensor_scalar(neg, stat, "multiply", -1.0)
            # per row on ScalarE: exp(x - max) with the row sum accumulated for free [ISAcost]
            _per_row(ctx, e, x, p, r, C, "exp", bias=neg, reduce_res=ssum)
            src = x if log else e
        else:           # short rows: whole-block passes (an instruction costs >= min_ii_cycles)
            src = ctx.tmp("xm", (p, r * C), "float32", j) if log else e     # x - max
            b.tensor_tensor(src, x, _each_col(stat, p, r, C), "subtract")
            b.activation(e, src, "exp")
            b.tensor_reduce(ssum, e, "add")
        b.activation(ssum, ssum, "log" if log else "reciprocal")
        if log and per_row:
            # the bias -max - log(sum) = log(sum) * -1 + (-max) per row, on ScalarE after the
            # log (a VectorE step between them costs a round trip: +5% on [4096, 2048] BF16)
            _per_row(ctx, ssum, ssum, p, r, 1, scale=-1.0, bias=neg)

        def tail():
            if not per_row:     # (x - max) - log(sum) / e * (1/sum)
                b.tensor_tensor(out, src, _each_col(ssum, p, r, C),
                                "subtract" if log else "multiply")
                return
            # x - max - log(sum) / e * (1/sum): bias or scale, free
            _per_row(ctx, out, src, p, r, C, bias=ssum if log else None,
                     scale=1.0 if log else ssum)
        return tail
    return body


@lowers("aten::_softmax", "aten::softmax", "aten::_safe_softmax", "aten::_log_softmax",
        "aten::log_softmax", "aten::_softmax_backward_data", "aten::_log_softmax_backward_data",
        reads=reads.ROWS)
def softmax(ctx, op):
    """softmax and log_softmax; their backward ops take (grad, output)."""
    backward = op.op.endswith("_backward_data")
    body = _softmax_body(ctx, "log_softmax" in op.op, backward)
    row_blocks(ctx, op.inputs[0], op.outputs[0], body,
               extra_in=op.inputs[1:2] if backward else ())


def _norm_body(ctx, params, rms=False, eps=1e-5):
    """Statistics, normalisation and affine of a block of r rows of C; params(p, r, C, j):
    block j's weight and bias operands (None: not applied)."""
    b = ctx.b

    def body(srcs, dsts, p, r, C, j):
        x, out = srcs[0], dsts[0]
        affine_w, affine_b = params(p, r, C, j)
        mv = ctx.tmp("mv", (p, 2 * r), "float32", j)
        if rms:     # the mean square: sum((x / C) * x) per row
            sq = ctx.tmp("sq", (p, r * C), "float32", j)
            stt(ctx, sq, x, "multiply", 1.0 / C, "multiply", x)
            b.tensor_reduce(mv[0:p, 0:r], sq, "add")
            mean, var = None, mv[0:p, 0:r]
        else:
            fmax = ctx.chip.bn_stats_free_elems_max
            nchunk = ceil(C / fmax)
            stats = ctx.tmp("st", (p, 6 * nchunk), "float32", j)
            for row in range(r):
                for c in range(nchunk):
                    b.bn_stats(stats[0:p, 6 * c:6 * c + 6],
                               ctx.cols(x, p, row * C + c * fmax, min(fmax, C - c * fmax)))
                b.bn_aggr(mv[0:p, 2 * row:2 * row + 2], stats)
            # bn_aggr's (mean, var) pairs, side by side per row
            mean, var = mv[0:p, 0:2 * r:2], mv[0:p, 1:2 * r:2]
        rstd = ctx.tmp("rstd", (p, r), "float32", j)
        # rstd = (var + eps) ^ -0.5 as one VectorE tensor_scalar (add, power): no round trip
        # to ScalarE between the statistics and nb below
        b.tensor_scalar(rstd, var, "add", eps, "power", -0.5)
        nb = None
        if not rms:     # nb = -mean * rstd
            nb = ctx.tmp("nb", (p, r), "float32", j)
            stt(ctx, nb, mean, "multiply", -1.0, "multiply", rstd)
        # (x - mean) * rstd = x * rstd + (-mean * rstd): one activation
        _per_row(ctx, out, x, p, r, C, bias=nb, scale=rstd)

        def tail():
            if affine_w is not None:
                b.tensor_tensor(out, out, affine_w, "multiply")
            if affine_b is not None:
                b.tensor_tensor(out, out, affine_b, "add")
            for d, st in zip(dsts[1:], [rstd] if rms else [mean, rstd]):   # saved statistics
                b.tensor_copy(d, st)
        return tail
    return body


def _each_row(param, p, r, C) -> AccessPattern:
    """A [p, C] parameter tile read as [p, r, C] (stride 0 across the rows): the weight for a
    block of r rows of C, held once."""
    return _read_as(param, p, ((r, 0), (C, 1)))


def _read_as(param, p, dims) -> AccessPattern:
    """p partitions of a parameter tile read with free dims `dims` (stride 0: a value reused)."""
    a = as_ap(param)
    return AccessPattern(a.tensor, a.p_start, p, a.offset, dims)


def _param_tile(ctx, t: TensorSpec, p, n):
    """A per-feature parameter (weight/bias [C]) broadcast to all partitions, loaded once."""
    tile = ctx.tile(f"param{ctx.tiles_named('param')}", (p, n), t.dtype)
    ctx.b.dma_copy(tile, AccessPattern(ctx.in_hbm(t), 0, p, 0, ((n, 1),), 0))
    return tile


@lowers("aten::native_layer_norm", "aten::layer_norm", "aten::rms_norm", "aten::_fused_rms_norm",
        "aten::instance_norm", reads=reads.ROWS)
def layer_norm(ctx, op):
    x, out = op.inputs[0], op.outputs[0]
    rms = op.op in ("aten::rms_norm", "aten::_fused_rms_norm")
    params = [t for t in op.inputs[1:] if t.ndim == 1 and t.numel > 1][:2]
    rows, C = _rows_cols(x)
    # the parameter tiles span the partitions of row_blocks' blocks (a long row is processed
    # in pieces, one piece per partition row) and hold one row of weight, read for each row of
    # a block; a weight row too wide to stay resident (> 3/4 of SBUF, or more elements than an
    # instruction reads) is held as its first piece instead
    k = _pieces(ctx.chip, C)
    p = max(1, min(ctx.P, rows * k))
    if len(params) * C * itemsize(x.dtype) > 3 * ctx.chip.sbuf_usable_bytes_per_partition // 4 \
            or C > ctx.chip.sbuf_free_elems_max:
        C = ceil(C / k)
    w, bb = [_param_tile(ctx, t, p, C) for t in params] + [None] * (2 - len(params))
    eps = op.arg(3 if rms else 4)       # (batch norms: not a number there; it costs the same)
    if not isinstance(eps, (int, float)):   # torch's defaults: rms_norm the dtype's epsilon
        eps = float(ml_dtypes.finfo(np_dtype(x.dtype)).eps) if rms else 1e-5
    outs = [o for o in op.outputs if o.numel > 0]
    row_blocks(ctx, x, TensorSpec(x.shape, out.dtype, None, out.id if out.id is not None
                                  else ("ln", out.layout_key)),
               _norm_body(ctx, lambda p, r, C, j: [None if t is None else _each_row(t, p, r, C)
                                                   for t in (w, bb)], rms, eps),
               per_row=True, outs=[out] + outs[1:3])


def _group_params(ctx, t: TensorSpec, p, r, first, groups, cg, staged: dict):
    """[p, r * cg] of the per-channel parameter t ([groups * cg]) for r rows a partition, rows
    of a group each from group `first` on: partition q holds the cg channels of the groups
    (first + q * r + i) % groups, i < r, i.e. t repeated from channel first * cg on. One DMA
    when that is whole rounds of t (a partition stride 0 over the rounds); else the rounds the
    block reaches, held on one partition (`staged`, loaded once per op), copied to the
    partitions by one SBUF -> SBUF DMA (an access of a few partitions may start only at some
    partitions: no pieces of rounds)."""
    tile = ctx.tile(f"param{ctx.tiles_named('param')}", (p, r * cg), t.dtype)
    h = ctx.in_hbm(t)
    rounds, part = divmod(p * r, groups)
    if first == 0 and part == 0:
        ctx.b.dma_copy(tile, AccessPattern(h, 0, rounds, 0, ((groups * cg, 1),), 0))
        return tile
    k = ctx.key(t)
    if k not in staged:     # (the first block staged has the most rows: r only shrinks)
        reach = ceil((first + p * r) / groups)
        staged[k] = ctx.tile(f"param{ctx.tiles_named('param')}", (1, reach * groups * cg),
                             t.dtype)
        ctx.b.dma_copy(staged[k], AccessPattern(h, 0, 1, 0, ((reach, 0), (groups * cg, 1))))
    ctx.b.dma_copy(tile, AccessPattern(staged[k], 0, 1, first * cg, ((p * r * cg, 1),)))
    return tile


def group_rows(op) -> tuple:
    """(rows, cols) of group norm's input as rows of a group of a sample each."""
    x = op.inputs[0]
    rows = x.shape[0] * op.arg(6 if op.op == "aten::native_group_norm" else 1)
    return rows, x.numel // rows


@lowers("aten::native_group_norm", "aten::group_norm")
def group_norm(ctx, op):
    """Rows of [N * groups, C / groups * HW], a group of a sample each (its [N, groups] mean and
    rstd: one value per row), normalised as layer_norm's rows; then the per-channel weight and
    bias, one VectorE pass each: partition q of block j holds rows j * r * p + q * rj + i
    (row_blocks), whose groups' channels _group_params holds, each read along its HW columns.
    A row longer than chip.row_whole_max_elems runs in pieces (row_blocks), each with one
    weight and bias value (timing)."""
    x, out = op.inputs[0], op.outputs[0]
    native = op.op == "aten::native_group_norm"
    w, bias = (op.arg(1), op.arg(2)) if native else (op.arg(2), op.arg(3))
    eps = op.arg(7 if native else 4, 1e-5)
    rows, cols = group_rows(op)
    groups = rows // x.shape[0]
    hw = cols // (x.shape[1] // groups)
    tiles, staged, full = {}, {}, {}

    def params(p, r, C, j):
        whole = C == cols       # (else a piece of a long row: one value of each, timing)
        # block j's first row: j * p * the rows of block 0 (it comes first, and full)
        key = (j * p * full.setdefault("r", r) % groups, r) if whole else "piece"
        if key not in tiles:
            tiles[key] = [None if not isinstance(t, TensorSpec)
                          else _group_params(ctx, t, p, r, key[0], groups, C // hw, staged)
                          if whole else _param_tile(ctx, t, p, 1) for t in (w, bias)]
        dims = ((r * C // hw, 1), (hw, 0)) if whole else ((r * C, 0),)
        return [None if t is None else _read_as(t, p, dims) for t in tiles[key]]
    view = [TensorSpec((rows, cols), t.dtype, None, t.id) for t in (x, out)]
    row_blocks(ctx, view[0], view[1], _norm_body(ctx, params, eps=eps), per_row=True,
               outs=[view[1]] + [o for o in op.outputs[1:3] if o.numel > 0])


def backward_row_max(chip, g: TensorSpec, x: TensorSpec, gi: TensorSpec, w) -> int:
    """The longest row layer_norm_backward keeps whole: g, x and grad_in triple-buffered, its
    four FP32 temporaries double-buffered, the weight once, its two FP32 column sums
    (_column_sums); a longer row runs in pieces."""
    per_elem = 3 * (itemsize(g.dtype) + itemsize(x.dtype) + itemsize(gi.dtype)) \
        + 4 * 2 * 4 + (itemsize(w.dtype) if w is not None else 0) + 2 * 4
    room = chip.sbuf_usable_bytes_per_partition - chip.row_op_small_tiles_bytes_per_partition
    return min(chip.row_whole_max_elems, room // per_elem)


def _grad_outputs(op, names, mask_at):
    """op's outputs by name (None: not asked for): the output mask says which are defined, in
    order (an undefined output is no tensor: the defined ones shift left)."""
    mask = op.arg(mask_at)
    mask = mask if isinstance(mask, (tuple, list)) else (True,) * len(names)
    outs = iter(o for o in op.outputs if o is not None and o.numel > 0)
    return {n: next(outs, None) if m else None for n, m in zip(names, mask)}


def _column_sums(ctx, p, C, dtypes):
    """Per-column sums over the partitions of every block, on TensorE against ones vectors
    (one per operand dtype: TensorE takes FP32 only against FP32), accumulated in PSUM, one
    [1, <= bank] tile per bank of columns, held for the whole op (the streaming tiles are
    released when the rows end); when the sums need more banks than PSUM has, each block's
    sums are evacuated and added in SBUF instead (VectorE, one PSUM operand).
    Returns add(name, src, r, j), for block j's r rows, and store(name, out)."""
    b = ctx.b
    bank = ctx.chip.psum_bank_fp32_elems
    ones = {dt: _ones(ctx, p, dt) for dt in dict.fromkeys(dtypes.values())}
    spans = [(c0, min(bank, C - c0)) for c0 in range(0, C, bank)]
    in_psum = len(dtypes) * len(spans) <= ctx.chip.psum_banks
    psum = {(k, c0): b.psum(f"colsum{k}{c0 // bank}", (1, cn), "float32")
            for k in dtypes for c0, cn in spans} if in_psum else {}
    acc = {k: b.sbuf(f"colacc{k}", (1, C), "float32") for k in dtypes} if not in_psum else {}

    def add(k, src, r, j):
        for i, (c0, cn) in enumerate(spans):
            ps = psum[k, c0] if in_psum else ctx.tile("colsum", (1, bank), "float32",
                                                      j * len(spans) + i, Memory.PSUM)[0:1, 0:cn]
            for row in range(r):
                b.nc_matmul(ps, ones[dtypes[k]], ctx.cols(src, p, row * C + c0, cn),
                            accumulate=row > 0 or (in_psum and j > 0))
            if not in_psum:
                a = acc[k][0:1, c0:c0 + cn]
                if j == 0:
                    b.tensor_copy(a, ps)
                else:
                    b.tensor_tensor(a, a, ps, "add")

    def store(k, o):
        res = acc.get(k)
        if res is None or o.dtype != "float32":
            res = b.sbuf(f"colsum_sb{k}", (1, C), o.dtype)
            for c0, cn in spans:
                b.tensor_copy(res[0:1, c0:c0 + cn], psum[k, c0] if in_psum else
                              acc[k][0:1, c0:c0 + cn])
        n = min(o.numel, C)
        ctx.store(o, res[0:1, 0:n], 1, 0, n)
        b.free(*(t for (kk, _), t in psum.items() if kk == k), res,
               *([acc[k]] if k in acc else []))
    return add, store


# backward op -> the positions of its weight and output mask (the saved statistics precede the
# weight: mean, rstd; rms_norm's rstd alone)
BACKWARD_ARGS = {"aten::native_layer_norm_backward": (5, 7),
                  "aten::_fused_rms_norm_backward": (4, 5),
                  "aten::native_group_norm_backward": (4, 9)}


@lowers(*BACKWARD_ARGS, reads=reads.ROWS)
def layer_norm_backward(ctx, op):
    """Per row, with xhat = (x - mean) * rstd from the forward's saved mean and rstd (rms_norm:
    x * rstd, no mean) and gw = g * w:
        grad_input = rstd * (gw - sum(gw) / C - xhat * sum(gw * xhat) / C)
    ScalarE (a per-row scale and bias are free): xhat, the row sum of gw (accumulated for
    free), xhat * (-s2 / C) + (-s1 / C) and the final scaling by rstd; VectorE: g * w, g * xhat,
    (g * xhat) * w with its row sum, the add, and two [p, r] steps (-mean * rstd, the two
    coefficients). grad_weight = sum over rows of g * xhat and grad_bias = sum of g: column
    sums on TensorE (_column_sums). Outputs the mask leaves out are not computed.
    Group norm (timing): rows of the last dim, as its forward."""
    rms = op.op == "aten::_fused_rms_norm_backward"
    g, x = op.inputs[0], op.inputs[1]
    at_weight, at_mask = BACKWARD_ARGS[op.op]
    named = _grad_outputs(op, ("in", "w") if rms else ("in", "w", "b"), at_mask)
    rstd = op.arg(at_weight - 1)
    mean = None if rms else op.arg(at_weight - 2)
    weight = op.arg(at_weight)
    weight = weight if isinstance(weight, TensorSpec) else None
    gi = named["in"]
    rows, C = _rows_cols(x)
    long_row = backward_row_max(ctx.chip, g, x, x if gi is None else gi, weight)
    stats = [t for t in (mean, rstd) if t is not None]
    if C > long_row:        # pieces of a row as rows (timing: each piece's own statistics)
        k = ceil(C / long_row)
        x, g = (TensorSpec((rows * k, ceil(C / k)), t.dtype, None, t.id) for t in (x, g))
        gi = None if gi is None else TensorSpec(x.shape, gi.dtype, None, gi.id)
        rows, C = _rows_cols(x)
    # statistics and weight of other rows and columns than x's (a long row's pieces; group norm's
    # [N, groups] and [channels]): read as one per row and column (timing)
    stats = [t if t.numel == rows else TensorSpec((rows,), t.dtype, None, t.id) for t in stats]
    if weight is not None and weight.numel != C:
        weight = TensorSpec((C,), weight.dtype, None, weight.id)
    p = max(1, min(ctx.P, rows))
    w = _param_tile(ctx, weight, p, C) if weight is not None else None
    sums = {k: dt for k, dt in (("w", "float32"), ("b", g.dtype)) if named.get(k) is not None}
    add_sums, store_sums = _column_sums(ctx, p, C, sums)
    b = ctx.b
    inv_c = -1.0 / C

    def body(srcs, dsts, p, r, C, j):
        gg, xx = srcs[0], srcs[1]
        rs = srcs[-1]
        xhat = ctx.tmp("xhat", (p, r * C), "float32", j)
        nb = None
        if not rms:     # nb = -mean * rstd: xhat = x * rstd + nb, one activation per row
            nb = ctx.tmp("nb", (p, r), "float32", j)
            stt(ctx, nb, srcs[2], "multiply", -1.0, "multiply", rs)
        _per_row(ctx, xhat, xx, p, r, C, bias=nb, scale=rs)
        wj = None if w is None else _each_row(w, p, r, C)    # the block's rows of weight
        gw = gg
        if wj is not None:
            gw = ctx.tmp("gw", (p, r * C), "float32", j)
            b.tensor_tensor(gw, gg, wj, "multiply")
        gx = None
        if gi is not None or "w" in sums:
            gx = ctx.tmp("gx", (p, r * C), "float32", j)
            b.tensor_tensor(gx, gg, xhat, "multiply")
        s = None
        if gi is not None:
            s = ctx.tmp("s12", (p, 2 * r), "float32", j)     # s1 | s2 per row
            if not rms:     # s1 = sum(gw) per row, free on ScalarE (its copy is discarded)
                _per_row(ctx, dsts[0], gw, p, r, C, reduce_res=s[0:p, 0:r])
            gxw = gx
            if wj is not None:
                gxw = gx if "w" not in sums else ctx.tmp("gxw", (p, r * C), "float32", j)
                b.tensor_tensor(gxw, gx, wj, "multiply")
            b.tensor_reduce(s[0:p, r:2 * r], gxw, "add")
            # the coefficients -s1 / C and -s2 / C of the row's bias and scale
            lo = r if rms else 0
            b.tensor_scalar(s[0:p, lo:2 * r], s[0:p, lo:2 * r], "multiply", inv_c)

        def tail():
            if gi is not None:
                # xhat * (-s2 / C) + (-s1 / C), in place
                _per_row(ctx, xhat, xhat, p, r, C, bias=None if rms else s[0:p, 0:r],
                         scale=s[0:p, r:2 * r])
                b.tensor_tensor(xhat, gw, xhat, "add")
                _per_row(ctx, dsts[0], xhat, p, r, C, scale=rs)
            for k, src in (("w", gx), ("b", gg)):
                if k in sums:
                    add_sums(k, src, r, j)
        return tail
    out = gi if gi is not None else TensorSpec(g.shape, g.dtype, None, ("lnb", g.layout_key))
    row_blocks(ctx, g, out, body, extra_in=(x,), per_row=True, outs=[] if gi is None else [gi],
               row_in=tuple(stats))
    for k in sums:
        store_sums(k, named[k])


# ---- losses -------------------------------------------------------------------------------------
def _classes(logp: TensorSpec) -> tuple:
    """(C, S): nll_loss's classes (dim 1 of [N, C, ...]; a 1-D input's only dim) and the
    positions per image that each take a class (nll_loss2d: H x W; 1 for [N, C])."""
    return logp.shape[min(1, logp.ndim - 1)], prod(logp.shape[2:])


def _nll_picks(ctx, picked: TensorSpec, h, target: TensorSpec, bufs=BUFS):
    """The blocks of the one element per target, picked[n, target[n, s], s], at picked's HBM
    tensor h (nll_loss reads logp's: `in_hbm`; nll_loss_backward writes grad_input's:
    `to_hbm`): (j, p, r, slots, index tile, indirect pattern of h) with movement.index_blocks'
    rows for [N, C]; a target outside [0, C) (ignore_index) is skipped (oob_mode='skip'):
    nothing is read or written for it. The target adds target * S elements to its position's
    address. The index tiles rotate through `bufs` buffers."""
    C, S = _classes(picked)
    if S > 1:
        yield from _image_picks(ctx, h, target, C, S, itemsize(picked.dtype), bufs)
        return
    for j, p, r, per_blk in index_blocks(ctx, picked.numel // C, itemsize(picked.dtype)):
        at = IndirectPattern(h, 0, p, j * per_blk * C, ((r, C), (1, 1)), r * C, scale=1, bound=C)
        yield j, p, r, per_blk, index_tile(ctx, target, j, p, r, per_blk, bufs), at


def _image_picks(ctx, h, target: TensorSpec, C, S, isz, bufs):
    """nll_loss2d's blocks, image by image (an image's positions are affine in a block's
    partition and slot; two images' are not: C * S apart): p partitions x r consecutive
    positions of one image; the positions that fill no whole [P, r] block go as one [P,
    left // P] and one [left % P, 1] block, so no slot reaches into the next image."""
    P = ctx.P
    r = max(1, min(ceil(S / P), ctx.chip.gather_rows_bytes_per_partition // isz))
    whole = S // (P * r)
    left = S - whole * P * r
    pieces = [(k * P * r, P, r) for k in range(whole)] + \
        [(s0, p, rr) for s0, p, rr in ((whole * P * r, P, left // P),
                                        (S - left % P, left % P, 1)) if p * rr]
    ht = ctx.in_hbm(target)
    for j in range(ctx.repeat(target.numel // S * len(pieces))):
        n, (s0, p, rr) = j // len(pieces), pieces[j % len(pieces)]
        it = ctx.tile("idx", (p, rr), "int32", j, bufs=bufs)
        ctx.b.dma_copy(it, AccessPattern(ht, 0, p, n * S + s0, ((rr, 1),), rr))
        at = IndirectPattern(h, 0, p, n * C * S + s0, ((rr, 1), (1, 1)), rr, scale=S, bound=C)
        yield j, p, rr, P * r, it, at


@lowers("aten::nll_loss_forward", "aten::nll_loss", "aten::nll_loss2d_forward", "aten::nll_loss_nd")
def nll_loss(ctx, op):
    """Pick logp[n, target[n]] for every row (an indirect DMA of one element per row on GpSimd
    descriptors, ignore_index skipped: its pick stays 0), count the ignored rows (VectorE
    equal), sum both over partitions (TensorE) and store -sum (reduction sum) or -sum /
    (rows - ignored) (mean), and that count as total_weight."""
    b = ctx.b
    logp, target = op.inputs[0], op.inputs[1]
    rows = logp.numel // max(_classes(logp)[0], 1)
    # every block's indices are loaded before the first pick (the picks tile's width is
    # theirs): each block's index tile its own buffer, none overwritten before it is read
    blocks = list(_nll_picks(ctx, logp, ctx.in_hbm(logp), target, bufs=1 << 30))
    cols = sum(r for _, _, r, *_ in blocks)
    picks, ignored = (ctx.tile(k, (ctx.P, cols), "float32", 0) for k in ("pk", "ign"))
    b.memset(picks, 0.0)
    b.memset(ignored, 0.0)
    c0 = 0
    for j, p, r, _, it, at in blocks:
        b.dma_copy(picks[0:p, c0:c0 + r], at, index=it, dge="swdge", oob_mode="skip")
        b.tensor_scalar(ignored[0:p, c0:c0 + r], it, "equal", float(op.arg(4, -100)))
        c0 += r
    acc = ctx.tile("acc", (ctx.P, 2), "float32", 0)
    b.tensor_reduce(acc[:, 0:1], picks, "add")
    b.tensor_reduce(acc[:, 1:2], ignored, "add")
    ps = ctx.tile("psum_red", (1, 2), "float32", 0, Memory.PSUM)
    b.nc_matmul(ps, _ones(ctx, ctx.P, "float32"), acc)
    res = ctx.tile("red_out", (1, 2), "float32", 0)
    b.tensor_copy(res, ps)
    loss, count = res[0:1, 0:1], res[0:1, 1:2]
    b.tensor_scalar(count, count, "multiply", -1.0, "add", float(rows))
    if op.arg(3, 1) == 1:                                  # mean over the rows not ignored
        b.tensor_scalar(loss, loss, "divide", count, "multiply", -1.0)
    else:
        b.tensor_scalar(loss, loss, "multiply", -1.0)
    for out, value in zip(op.outputs, (loss, count)):
        ctx.store(out, value, 1, 0, 1)


@lowers("aten::nll_loss_backward", "aten::nll_loss2d_backward")
def nll_loss_backward(ctx, op):
    """Zero grad_input, then write -grad (reduction sum) or -grad / total_weight (mean) at each
    row's target (an indirect DMA of one element per row; ignore_index skipped)."""
    b = ctx.b
    out = op.outputs[0]
    grad, target = op.inputs[0], next(t for t in op.inputs if t.dtype == "int32")
    ctx.stream(out, [], lambda s, d, p, f, j: b.memset(d[0], 0.0))
    h = ctx.to_hbm(out)             # the picks below scatter into HBM: zeros there first
    g = ctx.tile("g", (ctx.P, 1), "float32", 0)        # the scalar on every partition
    b.dma_copy(g, AccessPattern(ctx.in_hbm(grad), 0, ctx.P, 0, ((1, 1),), 0))
    if op.arg(4, 1) == 1 and isinstance(op.arg(6), TensorSpec):
        tw = ctx.tile("tw", (ctx.P, 1), "float32", 0)
        b.dma_copy(tw, AccessPattern(ctx.in_hbm(op.arg(6)), 0, ctx.P, 0, ((1, 1),), 0))
        b.tensor_tensor(g, g, tw, "divide")
    b.tensor_scalar(g, g, "multiply", -1.0)
    for j, p, r, _, it, at in _nll_picks(ctx, out, h, target):
        vals = ctx.tile("vals", (p, r), out.dtype, j)
        b.tensor_copy(vals, AccessPattern(g, 0, p, 0, ((r, 0),)))
        b.dma_copy(at, vals, index=it, dge="swdge", oob_mode="skip")
    ctx.end_op()


@lowers("aten::mse_loss", "aten::l1_loss", "aten::smooth_l1_loss", "aten::huber_loss",
        "aten::binary_cross_entropy", "aten::binary_cross_entropy_with_logits",
        "aten::soft_margin_loss", "aten::kl_div", reads=reads.BROADCAST)
def pointwise_loss(ctx, op):
    """Element-wise difference/penalty on VectorE/ScalarE, reduced in SBUF chunk by chunk (the
    per-element losses never go to HBM), then a mean over partitions on TensorE."""
    x = op.inputs[0]
    out = op.outputs[0]
    reduce = out.numel == 1 and x.numel > 1
    if op.op in (*_LOSS_FUNC, "aten::smooth_l1_loss", "aten::huber_loss"):
        _loss_of_difference(ctx, op, reduce)
        return
    steps = [(TT, "subtract"), (TT, "multiply")]
    if "cross_entropy" in op.op:
        steps = [("act", "sigmoid"), ("act", "log"), (TT, "multiply"), (TT, "add")]
    if not reduce:
        elementwise(ctx, op, steps, n_inputs=2)
        return
    tmp = TensorSpec(x.shape, "float32", None, ("lossel", x.id))
    p = ctx.flat_shape(x)[0]
    acc = ctx.tile("acc", (p, 1), "float32", 0)
    ins = [t for t in op.inputs if t.numel == x.numel][:2]

    def body(srcs, dsts, pp, f, j):
        part = ctx.tmp("part", (pp, 1), "float32", j)
        y = run_recipe(ctx, steps, srcs, dsts[0], pp, f, j)
        ctx.b.tensor_reduce(part, y, "add")
        ctx.b.tensor_tensor(acc[0:pp, 0:1], acc[0:pp, 0:1], part, "add")
    ctx.stream(tmp, ins, body, store=False)
    partition_sum(ctx, acc, p, 1, out)


# the losses of d = x - y that are one ScalarE function of it, or (smooth_l1, huber) VectorE
# steps then a ScalarE copy: the reduction is free in ScalarE's accumulator (activation_reduce,
# reduce_cmd reset_reduce on the first chunk, reduce after) [ISA]
_LOSS_FUNC = {"aten::mse_loss": "square", "aten::l1_loss": "abs"}


def _smooth(ctx, op, d, dst, tmp):
    """smooth_l1 (c = beta): |d| < c ? d^2 / 2c : |d| - c/2; huber (c = delta) c times that with
    beta 1. Both are m' (|d| - m/2) with m = min(|d|, c), m' = m / c (smooth_l1) or m (huber)."""
    c = number(op.arg(3), 1.0)
    ctx.b.activation(tmp(1), d, "abs")             # |d| on ScalarE, beside VectorE's m
    ctx.b.tensor_scalar(tmp(2), d, "abs_max", 0.0, "minimum", c)
    stt(ctx, tmp(3), tmp(2), "multiply", -0.5, "add", tmp(1))
    if op.op == "aten::huber_loss":
        ctx.b.tensor_tensor(dst, tmp(2), tmp(3), "multiply")
    else:
        stt(ctx, dst, tmp(2), "divide", c, "multiply", tmp(3))


def _loss_of_difference(ctx, op, reduce):
    x, out = op.inputs[0], op.outputs[0]
    smooth = op.op not in _LOSS_FUNC and number(op.arg(3), 1.0) != 0    # beta 0: l1
    func = "copy" if smooth else _LOSS_FUNC.get(op.op, "abs")
    p = ctx.flat_shape(x)[0]
    acc = ctx.tile("acc", (p, 1), "float32", 0) if reduce else None

    def body(srcs, dsts, pp, f, j):
        def tmp(i):
            return ctx.tmp(f"lossd{i}", (pp, f), "float32", j)
        d = tmp(0)
        ctx.b.tensor_tensor(d, srcs[0], srcs[1], "subtract")
        if smooth:
            _smooth(ctx, op, d, d if reduce else dsts[0], tmp)
            if not reduce:
                return
        if not reduce:
            ctx.b.activation(dsts[0], d, func)
            return
        ctx.b.instruction("activation", dst=dsts[0], op=func, data=d, reduce_op="add",
                          reduce_res=acc[0:pp, 0:1], reduce_cmd="reduce" if j else "reset_reduce")
    if not reduce:
        ctx.stream(out, op.inputs[:2], body)
        return
    ctx.stream(TensorSpec(x.shape, "float32", None, ("lossel", x.id)), op.inputs[:2], body,
               store=False)
    partition_sum(ctx, acc, p, 1, out, divisor=x.numel if op.arg(2) in (None, 1) else 1)


@lowers("aten::mse_loss_backward", "aten::l1_loss_backward", "aten::smooth_l1_loss_backward",
        "aten::huber_loss_backward", "aten::binary_cross_entropy_backward",
        "aten::binary_cross_entropy_with_logits_backward", reads=reads.BROADCAST)
def pointwise_loss_backward(ctx, op):
    if op.op == "aten::mse_loss_backward" and len(op.inputs) == 3 \
            and op.inputs[1].numel == op.inputs[2].numel == op.outputs[0].numel \
            and op.inputs[0].numel in (1, op.outputs[0].numel):
        # ATen: (norm * (x - y)) * grad, norm = 2 / numel for the mean, else 2; a mean's or sum's
        # grad is one value ([p, 1] on every partition: a tensor_scalar operand)
        norm = 2.0 / op.outputs[0].numel if op.arg(3) in (None, 1) else 2.0

        def body(srcs, dsts, p, f, j):
            d = ctx.tmp("lossd", (p, f), "float32", j)
            ctx.b.tensor_tensor(d, srcs[1], srcs[2], "subtract")
            if as_ap(srcs[0]).free_size == 1 < f:
                ctx.b.tensor_scalar(dsts[0], d, "multiply", norm, "multiply", srcs[0])
            else:
                stt(ctx, dsts[0], d, "multiply", norm, "multiply", srcs[0])
        ctx.stream(op.outputs[0], op.inputs[:3], body)
        return
    ins = [t for t in op.inputs if t.numel > 1]
    elementwise(ctx, op, [(TT, "subtract"), (TT, "multiply")], n_inputs=max(1, min(2, len(ins))))
