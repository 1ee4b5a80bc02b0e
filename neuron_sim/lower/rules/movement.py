"""Data movement: device copies, transposes, cat/stack, views, embedding and index ops (gather,
scatter, index_put), arange, tril/triu.

- A contiguous same-dtype copy (or one between tensors laid out alike without gaps) is one
  HBM -> HBM `dma_copy` on the 16 DMA engines (both sides touch HBM, so it moves 2x the bytes
  through the core's HBM share) [DMAov]. clone/_to_copy without a cast time as this copy does
  (`device_copy`, elementwise.copy_like).
- A copy from a strided view whose innermost dimension is contiguous (a permute of attention heads)
  streams through SBUF with one descriptor per contiguous run, and one whose innermost dimension
  steps over elements (x[:, ::2]) with one descriptor per element; a true transpose (innermost
  dimension not the fastest in memory) uses `dma_transpose` (NC-v3+, ~90% DMA efficiency
  [ArchV3]) and otherwise element-wise descriptors.
- Gathers/scatters by an index tensor are indirect DMAs, which need software descriptor
  generation on GpSimd on NC-v3 (`dge="swdge"`, the only mode with gather/scatter) [DGE]: one
  descriptor per row, ~1 us issue per instruction (assumption swdge_instr_s), after the block's
  indices are in SBUF (`dma_copy(..., index=tile)`: rows at the index values). A scatter-add is
  one read-modify-write DMA (`dst_rmw_op="add"`): repeated indices add up.
- Views (view, reshape, transpose, slice, expand, ...) move no data: an empty program."""

from __future__ import annotations

from functools import partial
from math import ceil, prod

from ...numerics.formats import itemsize
from ...program.ap import AccessPattern, IndirectPattern
from ..context import BUFS
from ..registry import lowers
from ..spec import TensorSpec, dense_order

# _unsafe_view is a view that autograd does not track as one (AOT graphs and reshape of a fresh
# copy use it): no data moves.
VIEW_OPS = ("aten::view", "aten::_unsafe_view", "aten::reshape", "aten::t", "aten::transpose",
            "aten::permute", "aten::expand", "aten::slice", "aten::select", "aten::diagonal",
            "aten::as_strided", "aten::unsqueeze", "aten::squeeze", "aten::detach", "aten::alias",
            "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind",
            "aten::narrow", "aten::_reshape_alias", "aten::unfold", "aten::view_as",
            "aten::expand_as", "aten::set", "aten::resize", "aten::_local_scalar_dense",
            "aten::lift_fresh", "aten::empty", "aten::empty_strided", "aten::real",
            "aten::view_as_real", "aten::view_as_complex")


@lowers(*VIEW_OPS)
def view(ctx, op):
    """Metadata only: no instructions."""


def dma_hbm_copy(ctx, src: TensorSpec, out: TensorSpec, out_offset=0, rows=None, run=None,
                 out_row=None):
    """HBM -> HBM copy of src into out (at element offset), as `rows` runs of `run` elements,
    out_row (default run) elements apart in out (cat along an inner dim: out's row).

    The copy is cut into pieces of at most chip.copy_piece_bytes (so the DMA queues run in
    parallel; at LNC=2 at least chip.copy_split_min_bytes, below which one core does it all) and,
    at LNC=2, the pieces are shared by the two physical cores of the logical core like any
    other op's blocks (`ctx.split`): each core's DMA engines move their half through their
    share of the pair's HBM stack."""
    n = src.numel
    if n == 0:
        return
    if rows is None:
        rows, run = 1, n
    out_row = run if out_row is None else out_row
    isz = itemsize(src.dtype)
    if not ctx.needs_store(out):
        return
    hs, hd = ctx.in_hbm(src), ctx.hbm(out)
    total_bytes = rows * run * isz
    chip = ctx.chip
    piece = min(chip.copy_piece_bytes, max(chip.copy_split_min_bytes, ceil(total_bytes / ctx.lnc)))
    pieces = []                         # (dst AP, src AP)
    per = max(1, int(piece // max(run * isz, 1)))      # whole runs per piece
    for r0 in range(0, rows, per):
        rn = min(per, rows - r0)
        if rn == 1 and run * isz > piece:           # one long run: cut it, one row per engine
            parts = ceil(run * isz / piece)
            step = ceil(run / parts)
            w = ctx.chip.dma_engines_per_core
            for c0 in range(r0 * run, r0 * run + run, step):
                cn = min(step, r0 * run + run - c0)
                o0 = out_offset + r0 * out_row + c0 - r0 * run
                pieces.append((AccessPattern(hd, 0, w, o0, ((ceil(cn / w), 1),), ceil(cn / w)),
                               AccessPattern(hs, 0, w, c0, ((ceil(cn / w), 1),), ceil(cn / w))))
            continue
        pieces.append((AccessPattern(hd, 0, rn, out_offset + r0 * out_row, ((run, 1),), out_row),
                       AccessPattern(hs, 0, rn, r0 * run, ((run, 1),), run)))
    for dst, s in pieces[:ctx.split(len(pieces))]:
        ctx.b.dma_copy(dst, s)


def _transposed(t: TensorSpec) -> bool:
    """Whether t's innermost dimension steps over elements and is not its fastest-moving one in
    memory (x.t(), a permute that moved the last dimension): a copy of it is a `dma_transpose`.
    A step slice (x[:, ::2]) keeps its dimensions in memory order: a strided read, one
    descriptor per element. (A broadcast innermost dimension, stride 0, keeps the transpose's
    timing: no better model of it here.)"""
    if not t.ndim or t.shape[-1] <= 1 or t.strides[-1] == 1:
        return False
    inner = t.strides[-1]
    return inner == 0 or any(n > 1 and 0 < s < inner for n, s in zip(t.shape, t.strides))


def strided_copy(ctx, src: TensorSpec, out: TensorSpec):
    """Copy a non-contiguous src into out through SBUF. A transposed src is out's flat [p, cols]
    layout stored transposed, [cols, p]: chunk j of out (columns j*f.. j*f+fj) is its rows
    j*f.., fj rows of p contiguous elements. An out that a later op of the sequence reads stays
    in SBUF (ctx.out_tile), as the element-wise stream keeps it."""
    if _transposed(src) and ctx.chip.has_tensor_transpose_mode \
            and itemsize(src.dtype) in (2, 4):
        h = ctx.in_hbm(src)
        p, cols, f, chunks = ctx.chunked(out)
        for j, fj in chunks:
            dst = ctx.out_tile(out, p, cols, j, fj, off=j * f)
            tile = dst if out.dtype == src.dtype else ctx.tile("in", (p, fj), src.dtype, j)
            ctx.b.dma_transpose(tile, AccessPattern(h, 0, fj, j * f * p, ((p, 1),), p))
            if tile is not dst:
                ctx.b.tensor_copy(dst, tile)
            ctx.store(out, dst, p, j, fj, off=j * f)
        ctx.end_op()
        return
    # runs of the innermost contiguous extent: load with one descriptor per run, store contiguous
    ctx.stream(out, [src], lambda s, d, p, f, j: ctx.b.tensor_copy(d[0], s[0]))


def device_copy(ctx, src: TensorSpec, out: TensorSpec):
    """src copied into out as the DMA engines do it: one HBM -> HBM copy when both are of one
    dtype and contiguous (or laid out alike, without gaps), else through SBUF (strided_copy:
    dma_transpose for a transposed src)."""
    alike = (src.shape, src.strides) == (out.shape, out.strides)
    if src.dtype == out.dtype and (src.is_contiguous and out.is_contiguous
                                   or alike and dense_order(src.shape, src.strides) is not None):
        dma_hbm_copy(ctx, src, out)
    else:
        strided_copy(ctx, src, out)


@lowers("neuron::copy_d2d")
def copy_d2d(ctx, op):
    device_copy(ctx, op.args[0], op.outputs[0])


@lowers("aten::cat", "aten::stack", "aten::concat", "aten::concatenate", "aten::hstack",
        "aten::vstack")
def cat(ctx, op):
    """Each input lands in its slice of the output: rows = product of the dims before the cat
    dimension, runs = the input's extent from the cat dimension on."""
    tensors = [t for t in op.args[0] if t.numel > 0] if isinstance(op.args[0], (list, tuple)) \
        else op.inputs
    out = op.outputs[0]
    dim = op.arg(1, 0) or 0
    nd = out.ndim
    dim = dim % nd if nd else 0
    if op.op == "aten::stack":
        dim = min(dim, nd - 1)
    outer = prod(out.shape[:dim])
    off = 0
    for t in tensors:
        run = t.numel // max(outer, 1)
        if t.is_contiguous:
            dma_hbm_copy(ctx, t, out, out_offset=off, rows=outer, run=run,
                         out_row=out.numel // max(outer, 1))
        else:
            strided_copy(ctx, t, TensorSpec(t.shape, out.dtype, None, ("cat", off, out.id)))
        off += run


def index_blocks(ctx, n_idx: int, row_bytes: int):
    """The blocks of a gather or scatter of n_idx rows of row_bytes each: (j, p, r, per_blk),
    p partitions x r rows (one index each) per block, row j * per_blk + q * r + i at partition
    q, slot i; per_blk = P * r of the full blocks. Blocks past ctx.repeat's are not built."""
    P = ctx.P
    r = max(1, min(ceil(n_idx / P),
                   int(ctx.chip.gather_rows_bytes_per_partition // max(row_bytes, 1))))
    per_blk = P * r
    total = ceil(n_idx / per_blk)
    n = ctx.repeat(total)
    for j in range(n):
        left = n_idx - j * per_blk
        # a short last block takes ceil(left / P) rows per partition: its last partition's
        # unused slots then stay inside the dense tensors' padding (rounded up to P rows)
        rj = r if n < total or left >= per_blk else ceil(left / P)
        yield j, min(P, max(1, ceil(left / rj))) if n == total else P, rj, per_blk


def index_tile(ctx, idx: TensorSpec, j: int, p: int, r: int, per_blk: int, bufs=BUFS):
    """Block j's indices (index_blocks) loaded into an int32 [p, r] SBUF tile (one of `bufs`
    rotating buffers)."""
    it = ctx.tile("idx", (p, r), "int32", j, bufs=bufs)
    ctx.b.dma_copy(it, AccessPattern(ctx.in_hbm(idx), 0, p, j * per_blk, ((r, 1),), r))
    return it


def _indirect_rows(ctx, table: TensorSpec, n_idx: int, d: int, out: TensorSpec, *,
                   scatter_add=False, idx: TensorSpec = None, src: TensorSpec = None):
    """Gather (or scatter-add) n_idx rows of d elements between `table` (HBM) and a dense
    [n_idx, d] tensor, P indices (one per partition) x r rows per partition per block: row
    j * P * r + q * r + i of the dense tensor is table row idx[that row]. A gather is one
    indirect DMA into SBUF and a store; a scatter-add loads the rows and adds them into the
    table with one read-modify-write indirect DMA (repeated indices add up, in order)."""
    b = ctx.b
    # what the op reads is stored first if it stayed resident (in_hbm); a scatter-add's table
    # is its output
    ht = ctx.to_hbm(table) if scatter_add else ctx.in_hbm(table)
    hd = ctx.in_hbm(src) if scatter_add else ctx.hbm(out)
    for j, p, rj, per_blk in index_blocks(ctx, n_idx, d * itemsize(table.dtype)):
        rows = ctx.tile("rows", (p, rj * d), table.dtype, j)
        at = AccessPattern(hd, 0, p, j * per_blk * d, ((rj * d, 1),), rj * d)
        kw = {"dge": "swdge"}
        if idx is not None:
            kw["index"] = index_tile(ctx, idx, j, p, rj, per_blk)
        # each index moves one row; without an index tensor every row is row 0
        cls = AccessPattern if idx is None else partial(IndirectPattern, scale=d,
                                                        bound=table.numel // max(d, 1))
        indirect = cls(ht, 0, p, 0, ((rj, 0), (d, 1)), 0)
        if scatter_add:
            b.dma_copy(rows, at)
            b.dma_copy(indirect, rows, dst_rmw_op="add", **kw)
        else:
            b.dma_copy(rows, indirect, **kw)
            if ctx.needs_store(out):
                b.dma_copy(at, rows)
    ctx.end_op()


@lowers("aten::embedding", "aten::index_select", "aten::gather", "aten::index",
        "aten::take", "aten::take_along_dim", "aten::_embedding_bag")
def gather(ctx, op):
    out = op.outputs[0]
    table = op.inputs[0]
    idx = op.inputs[-1] if len(op.inputs) > 1 else None
    # whole rows of the table: an embedding, an index_select along dim 0
    rows = op.op == "aten::embedding" or op.op == "aten::index_select" and op.arg(1) == 0
    d = table.shape[-1] if rows and table.ndim >= 2 else 1
    n_idx = out.numel // max(d, 1)
    _indirect_rows(ctx, table, n_idx, d, out, idx=idx)


@lowers("aten::embedding_dense_backward", "aten::embedding_backward", "aten::index_add",
        "aten::scatter_add", "aten::index_put", "aten::_index_put_impl", "aten::scatter",
        "aten::scatter_reduce", "aten::index_copy", "aten::masked_scatter_backward")
def scatter(ctx, op):
    """Zero (or copy) the destination, then scatter-add the source rows into it."""
    out = op.outputs[0]
    if op.op in ("aten::embedding_dense_backward", "aten::embedding_backward"):
        grad, idx = op.inputs[0], op.inputs[1]
        d = grad.shape[-1]
        ctx.stream(out, [], lambda s, dd, p, f, j: ctx.b.memset(dd[0], 0.0))
        _indirect_rows(ctx, out, grad.numel // max(d, 1), d, out, scatter_add=True, idx=idx,
                       src=grad)
        return
    base = op.inputs[0]
    srcs = [t for t in op.inputs[1:] if t.dtype not in ("int32", "bool", "uint8")]
    idxs = [t for t in op.inputs[1:] if t.dtype in ("int32",)]
    src = srcs[-1] if srcs else base
    d = base.shape[-1] if base.ndim >= 2 and src.ndim >= 2 and src.shape[-1] == base.shape[-1] \
        else 1
    if not op.name.split("::")[-1].split(".")[0].endswith("_"):
        dma_hbm_copy(ctx, base, out)   # functional form: copy self first
    _indirect_rows(ctx, out, max(1, src.numel // max(d, 1)), d, out, scatter_add=True,
                   idx=idxs[0] if idxs else None, src=src)


@lowers("aten::arange", "aten::linspace", "aten::eye")
def arange(ctx, op):
    """iota on GpSimd (150 + N cycles [ISAcost]) and a store."""
    out = op.outputs[0]
    ctx.stream(out, [], lambda s, d, p, f, j: ctx.b.iota(d[0], base=j * f, channel_multiplier=1))


@lowers("aten::tril", "aten::triu", "aten::masked_fill_causal")
def tril(ctx, op):
    """affine_select on GpSimd (150 + N cycles [ISAcost]): keep or replace by position."""
    out = op.outputs[0]
    ctx.stream(out, [op.inputs[0]],
               lambda s, d, p, f, j: ctx.b.affine_select(d[0], s[0], 0.0))


@lowers("aten::flip", "aten::roll", "aten::repeat", "aten::tile", "aten::repeat_interleave",
        "aten::constant_pad_nd", "aten::pad", "aten::reflection_pad2d", "aten::replication_pad2d",
        "aten::im2col", "aten::col2im", "aten::pixel_shuffle", "aten::diag_embed",
        "aten::masked_select", "aten::slice_backward", "aten::select_backward",
        "aten::diagonal_backward", "aten::expand_backward")
def rearrange(ctx, op):
    """Rearranging copies: read the input once, write the output once (through SBUF)."""
    out = op.outputs[0]
    src = op.inputs[0] if op.inputs else out
    if src.numel != out.numel:
        ctx.stream(out, [], lambda s, d, p, f, j: ctx.b.memset(d[0], 0.0))
        dma_hbm_copy(ctx, src, out)
        return
    ctx.stream(out, [src], lambda s, d, p, f, j: ctx.b.tensor_copy(d[0], s[0]))
