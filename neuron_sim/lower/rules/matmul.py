"""Matrix products on TensorE: mm, bmm, addmm, baddbmm, linear, matmul, mv, dot, and convolution
as an implicit GEMM.

Tiling [ArchV2][Tile]: C[M, N] = A[M, K] @ B[K, N] with K on the partitions of both operands;
`nc_matmul(psum[128, 512], stationary=A^T[K=128, M=128], moving=B[K=128, N=512])` accumulates
over the K tiles in one PSUM bank (FP32). Cost per MultiplyMoving: max(min(64, M), N) cycles, x4
for FP32 operands; FP8 on NC-v3+ runs double_row (K = 256 per instruction at the BF16 cycle count).
Blocking: output blocks of TM x TN tiles whose A and B panels (all of K) fit the SBUF budget are
loaded once per block, so each panel is re-read from HBM N/BN (A) or M/BM (B) times; loops run
k-outer so a stationary tile serves TN moving tiles (LoadStationary skipped). PSUM results are
evacuated alternately by VectorE and ScalarE (bias added in the same pass), cast to the output
dtype and stored.
Layout: an operand whose K dimension is contiguous in memory (x in x @ W.T, or W in it) must be
transposed on the way in: `dma_transpose` (NC-v3+, ~90% of DMA throughput [ArchV3]) or, on chips
without it, a natural load plus a TensorE transpose through PSUM."""

from __future__ import annotations

from math import ceil, prod

from ...numerics.formats import FP8, itemsize
from ...program.ap import AccessPattern, Memory, as_ap
from .. import reads
from ..registry import LoweringError, lowers
from ..spec import TensorSpec
from .elementwise import stt


class _Mat:
    """A 2-D operand view [R, C] of a TensorSpec: row/column strides and a base offset."""

    def __init__(self, spec: TensorSpec, rows, cols, rs, cs, base=0, reuse=1):
        self.spec, self.rows, self.cols = spec, rows, cols
        self.rs, self.cs, self.base = rs, cs, base
        self.reuse = reuse      # >1: an im2col view; each loaded element serves `reuse` columns


def _mat2d(t: TensorSpec):
    """Last two dims of t as a matrix (leading dims batch; 1-D becomes a row/column)."""
    if t.ndim == 1:
        return _Mat(t, 1, t.shape[0], t.shape[0], t.strides[0])
    return _Mat(t, t.shape[-2], t.shape[-1], t.strides[-2], t.strides[-1])


def _load_k_major(ctx, m: _Mat, k_is_rows: bool, k0, kt, o0, on, dtype, role, slot):
    """SBUF tile [kt, on] holding the K-slice [k0, k0+kt) x other-slice [o0, o0+on) with K on
    partitions. k_is_rows: the matrix's rows are K (B operand) or its cols are (A operand)."""
    b = ctx.b
    h = ctx.hbm(m.spec)
    k_stride, o_stride = (m.rs, m.cs) if k_is_rows else (m.cs, m.rs)
    # a resident operand is read as written K-major ([P, K / P * other] per batch): the K
    # tile's and the batch's own columns
    other = m.cols if k_is_rows else m.rows
    ap = ctx.resident_ap(m.spec, kt, o0 + (m.base + k0 * other) // ctx.P, on)
    if ap is not None and ap.dtype == dtype:
        return ap
    ctx.in_hbm(m.spec)              # (a resident copy it cannot read in place: stored first)
    tile = ctx.tile(role, (kt, on), dtype, slot)
    if o_stride == 1 or on == 1:      # natural: each K row is contiguous along the other dim
        # implicit GEMM (reuse > 1): the patch matrix is built from shifted views of input rows
        # already in SBUF, so HBM supplies only 1/reuse of its elements (the input, read once)
        nl = max(1, ceil(on / m.reuse))
        b.dma_copy(tile if nl == on else tile[0:kt, 0:nl],
                   AccessPattern(h, 0, kt, m.base + k0 * k_stride + o0, ((nl, 1),),
                                 max(k_stride, 1)))
        return tile
    # K contiguous: transpose on the way in
    src = AccessPattern(h, 0, on, m.base + o0 * o_stride + k0, ((kt, 1),), max(o_stride, 1))
    if ctx.chip.has_tensor_transpose_mode and itemsize(dtype) in (2, 4):
        b.dma_transpose(tile, src)
        return tile
    for c0 in range(0, on, ctx.P):    # natural [<=P, kt] loads, TensorE transposes
        cn = min(ctx.P, on - c0)
        ctx._seq += 1
        nat = ctx.tile("nat", (cn, kt), dtype, ctx._seq)
        b.dma_copy(nat, AccessPattern(h, 0, cn, m.base + (o0 + c0) * o_stride + k0,
                                      ((kt, 1),), max(o_stride, 1)))
        ps = ctx.tile("tp", (kt, cn), "float32", ctx._seq, Memory.PSUM)
        b.nc_transpose(ps, nat)
        b.tensor_copy(tile[0:kt, c0:c0 + cn], ps)
    return tile


def _tile_sizes(chip, rows):
    """(K, M, N) of one nc_matmul: K rows on the partitions (x2 for double_row), M stationary
    columns, N moving columns filling one FP32 PSUM bank."""
    return (chip.matmul_partition_max * rows, chip.matmul_stationary_fmax,
            chip.psum_bank_fp32_elems)


def _operand_dtype(chip, a_dtype, b_dtype) -> tuple:
    """(dtype, rows): the dtype TensorE reads both operands in, and the K rows per partition
    (2: FP8 double_row)."""
    dtype = a_dtype
    if dtype in ("int32", "int8", "uint8", "bool", "int16", "uint32"):
        dtype = "float32"     # matmul has no integer data path: converted to FP32 [DTypes]
    if dtype != b_dtype and "float32" in (dtype, b_dtype):
        dtype = "float32"
    if dtype == "float8_e4m3fn" and not chip.has_mx_matmul:
        # OCP e4m3fn is NC-v4 only; Trn2 runs its own FP8 e4m3 (checkpoints are rescaled)
        dtype = "float8_e4m3"
    return dtype, 2 if dtype in FP8 and chip.has_fp8_double_row else 1


def _b_panel(chip, K, N, dtype, rows):
    """The N columns of gemm's resident B panel (all of K, in
    chip.gemm_panel_budget_bytes_per_partition); None when whole-K operand tiles do not fit
    (K too long: _gemm_kblocked)."""
    KT, MT, NT = _tile_sizes(chip, rows)
    isz = itemsize(dtype)
    kt_n = ceil(K / KT)
    budget = chip.gemm_panel_budget_bytes_per_partition
    if 2 * kt_n * MT * rows * isz > chip.gemm_whole_k_bytes_per_partition \
            or kt_n * min(N, NT) * rows * isz > budget:
        return None
    # B panel: kt_n tiles of [KT, BN * rows] per partition
    return min(N, max(1, min(ceil(N / NT), budget // max(kt_n * NT * rows * isz, 1))) * NT)


def _evacuate(ctx, o, acc, bias, alpha, beta, odd):
    """o = beta * bias + alpha * acc out of PSUM (bias None: acc, VectorE and ScalarE taking
    turns by `odd`); the bias added by VectorE in the same pass, a scale through
    scalar_tensor_tensor (tensor_tensor's cost: one operand in PSUM). alpha and beta both
    other than 1 are charged alike but apply alpha only (semantics.why_unchecked)."""
    if bias is None:
        (ctx.b.activation if odd else ctx.b.tensor_copy)(o, acc)
    elif alpha == beta == 1:
        ctx.b.tensor_tensor(o, acc, bias, "add")
    elif beta == 0:         # the bias is ignored, NaN too (torch.addmm)
        stt(ctx, o, acc, "multiply", alpha, "bypass", bias)
    elif alpha == 1:
        stt(ctx, o, bias, "multiply", beta, "add", acc)
    else:
        stt(ctx, o, acc, "multiply", alpha, "add", bias)


def gemm(ctx, batch, M, K, N, a: _Mat, bm: _Mat, out: TensorSpec, bias: TensorSpec = None,
         a_batch_stride=0, b_batch_stride=0, alpha=1, beta=1, sum_batches=False):
    """Emit C[batch, M, N] = A[batch, M, K] @ B[batch, K, N] (+ bias[N]; alpha * AB + beta *
    bias with `_evacuate`'s scales); sum_batches (addbmm): C[M, N] = sum over the batches,
    whose K tiles follow one another in the same PSUM accumulation (`_k_tiles`).

    Loop nest (per batch): for each N panel of BN columns, load B[:, panel] (all of K) once and
    keep it in SBUF, with the panel's bias row; for each MT-row M tile, load A^T[:, tile]
    (double-buffered) and for each NT-column moving tile (`_tile_sizes`) accumulate the K tiles
    in one PSUM bank, evacuate, store. HBM traffic: B once, A once per N panel. The repeated
    block is one M tile of one panel."""
    b = ctx.b
    chip = ctx.chip
    if K == 0 or M == 0 or N == 0:      # empty contraction: the output is zeros (or bias)
        ctx.stream(out, [], lambda s, d, p, f, j: b.memset(d[0], 0.0))
        return
    dtype, rows = _operand_dtype(chip, a.spec.dtype, bm.spec.dtype)
    double = rows == 2
    KT, MT, NT = _tile_sizes(chip, rows)
    kt_n = ceil(K / KT)                 # K tiles of one batch's product
    if sum_batches:
        kt_n, batch = batch * kt_n, 1
    BN = _b_panel(chip, kt_n * KT, N, dtype, rows)
    if BN is None:
        # K too long for whole-K panels in SBUF (weight gradients over many tokens)
        _gemm_kblocked(ctx, batch, M, K, N, a, bm, out, bias, dtype, rows, a_batch_stride,
                       b_batch_stride, alpha, beta, kt_n)
        return
    isz = itemsize(dtype)
    ktiles = _k_tiles(K, KT, rows, kt_n)
    budget = chip.gemm_panel_budget_bytes_per_partition     # SBUF for the resident B panel
    panels = ceil(N / BN)
    m_tiles = ceil(M / MT)
    # several M tiles per block when one tile's matmuls are short (small K or N): one DMA then
    # fetches their A columns together and the ~1 us DMA latency is amortised, as a compiler
    # sizes its tiles; bounded by two A buffers in chip.gemm_a_block_bytes_per_partition
    mult = chip.fp32_matmul_cost_multiplier if dtype in ("float32", "tfloat32") else 1
    mtile_s = kt_n * max(chip.mm_init_latency_cycles * ceil(BN / NT), BN) * mult \
        / chip.tensor_clock_hz
    mtb = max(1, min(8, m_tiles, ceil(2e-6 / max(mtile_s, 1e-12)),
                     chip.gemm_a_block_bytes_per_partition // max(2 * kt_n * MT * rows * isz, 1)))
    m_blocks = ceil(m_tiles / mtb)
    # tiny batched products (attention heads): G batches per block, each with its own buffers,
    # so the DMA latencies of G batches overlap instead of forming a chain
    G = 1
    if batch > 1 and panels == 1 and m_blocks == 1:
        per_batch = 2 * kt_n * (BN + mtb * MT) * rows * isz
        G = max(1, min(8, batch, ceil(2e-6 / max(mtile_s * m_tiles, 1e-12)),
                       chip.gemm_whole_k_bytes_per_partition // max(per_batch, 1)))
    total = ceil(batch / G) * panels * m_blocks
    n_sub = ceil(BN / NT)
    per_block = kt_n * (1 + 2 * n_sub * mtb) + 2 * n_sub * mtb
    n = ctx.repeat(total, cap=max(2, 900 // max(per_block, 1)))
    out_dt = out.dtype
    oh = ctx.hbm(out)
    # the bias row of one panel, broadcast over an M tile's partitions: loaded once, or with
    # each panel's B (one small DMA per panel) when there are several
    bias_tile = _bias_tile(ctx, bias, MT, 0, BN) if bias is not None and panels == 1 else None
    b_tiles, cur_panel, ot, npanel = {}, None, 0, 0
    b_slots = 2 if 2 * kt_n * BN * rows * isz <= budget else 1   # double-buffer small panels
    store = ctx.needs_store(out)
    for blk, g in ((blk, g) for blk in range(n) for g in range(G)):
        bg, rest = divmod(blk, panels * m_blocks)
        bi = bg * G + g
        if bi >= batch:
            continue
        pi, mi = divmod(rest, m_blocks)
        n0, m0 = pi * BN, mi * mtb * MT
        bn = min(BN, N - n0)
        mcols = min(mtb * MT, M - m0)
        if (bi, pi) != cur_panel:             # load the B panel (all K) for this N range
            cur_panel = (bi, pi)
            npanel += 1
            for kk, (bb, k0, kp) in enumerate(ktiles):
                bm.base = (bi + bb) * b_batch_stride
                b_tiles[kk] = _load_k_major(ctx, bm, True, k0, kp, n0, bn * rows, dtype,
                                            f"B{kk}_{g}", npanel % b_slots if G == 1 else blk)
            if bias is not None and panels > 1:
                bias_tile = _bias_tile(ctx, bias, MT, n0, bn, npanel)
        a_tiles = {}
        for kk, (bb, k0, kp) in enumerate(ktiles):
            a.base = (bi + bb) * a_batch_stride
            a_tiles[kk] = _load_k_major(ctx, a, False, k0, kp, m0, mcols * rows, dtype,
                                        f"A{kk}_{g}", blk % 2)
        mcount = ceil(mcols / MT)
        # small outputs of one block are gathered in one SBUF tile and stored by one DMA (one
        # ~1 us DMA latency per block instead of per [MT, N] tile)
        coalesce = mcount * bn * itemsize(out_dt) <= chip.gemm_output_coalesce_bytes_per_partition \
            and mcount > 1
        oblk = ctx.tile(f"oblk{g}", (min(MT, mcols), mcount * bn), out_dt, blk) \
            if coalesce else None
        # the moving operands of each N tile, made once per block (every M tile reads them)
        bts = [as_ap(b_tiles[kk]) for kk in range(kt_n)]
        ats = [as_ap(a_tiles[kk]) for kk in range(kt_n)]
        mvs = [[ctx.cols(bt, bt.p_size, j * NT * rows, min(NT, bn - j * NT) * rows) for bt in bts]
               for j in range(ceil(bn / NT))]
        for t in range(mcount):
            ms = min(MT, mcols - t * MT)
            sts = [ctx.cols(at, at.p_size, t * MT * rows, ms * rows) for at in ats]
            for j in range(ceil(bn / NT)):
                ns = min(NT, bn - j * NT)
                acc = ctx.tile("acc", (ms, ns), "float32", ot, Memory.PSUM)
                for kk in range(kt_n):
                    b.nc_matmul(acc, sts[kk], mvs[j][kk], accumulate=kk > 0,
                                perf_mode="double_row" if double else None)
                o = oblk[0:ms, t * bn + j * NT:t * bn + j * NT + ns] if coalesce \
                    else ctx.tile(f"o{g}", (ms, ns), out_dt, ot)
                bias_ap = None if bias_tile is None else bias_tile[0:ms, j * NT:j * NT + ns]
                _evacuate(ctx, o, acc, bias_ap, alpha, beta, ot % 2)
                ot += 1
                if store and not coalesce:
                    b.dma_copy(_tile_major(ctx, out, oh, bi, M, N, m0 + t * MT, ms,
                                           n0 + j * NT, ns), o)
        if store and coalesce:
            # M tile t's [MT, bn] block of the panel: the whole tiles (mcols > MT: at least
            # one) by one DMA, a run of bn per tile and partition; a short last tile by a
            # second one
            whole = mcols // MT
            b.dma_copy(_tile_major(ctx, out, oh, bi, M, N, m0, MT, n0, bn, whole),
                       oblk[0:MT, 0:whole * bn])
            ms = mcols - whole * MT
            if ms:
                b.dma_copy(_tile_major(ctx, out, oh, bi, M, N, m0 + whole * MT, ms, n0, bn),
                           oblk[0:ms, whole * bn:mcount * bn])


def _k_tiles(K, KT, rows, kt_n) -> list:
    """(batch offset, k0, partitions) of the kt_n K tiles accumulated into one output tile,
    ceil(K / KT) per batch: addbmm's summed batches follow one another along K (the operands'
    bases move to batch bi + offset for each)."""
    kt1 = ceil(K / KT)
    return [(kk // kt1, kk % kt1 * KT, ceil(min(KT, K - kk % kt1 * KT) / rows))
            for kk in range(kt_n)]


def _tile_major(ctx, out, oh, bi, M, N, r0, rows, c0, cols, tiles=1):
    """Where output blocks [rows, cols] of batch bi go (`tiles` of them, `rows` apart, from
    (r0, c0)): tile-major, each block row-major at r0 * N + c0 * rows of the [M, N] result,
    so the blocks of a row stripe lie side by side in its rows' range. Each store's footprint
    is then one range disjoint from the others' (the dependency tracker orders no two), with
    the bytes and descriptors per partition of the row-major rows: a timing-equivalent
    layout. The full build (semantics.py) records each block's place (`LowerCtx.placed`)
    to read the result back in order."""
    at = bi * M * N + r0 * N + c0 * rows
    if ctx.full:
        ctx.placed.setdefault(ctx.key(out), []).extend(
            (at + t * rows * N, rows, cols, bi * M * N + (r0 + t * rows) * N + c0, N)
            for t in range(tiles))
    dims = ((cols, 1),) if tiles == 1 else ((tiles, rows * N), (cols, 1))
    return AccessPattern(oh, 0, rows, at, dims, cols)


def _bias_tile(ctx, bias: TensorSpec, parts, n0, n, slot=0):
    """bias[n0:n0+n] broadcast to `parts` partitions (a stride-0 partition read)."""
    tile = ctx.tile("bias", (parts, n), bias.dtype, slot)
    ctx.b.dma_copy(tile, AccessPattern(ctx.in_hbm(bias), 0, parts, n0, ((n, 1),), 0))
    return tile


def _gemm_kblocked(ctx, batch, M, K, N, a, bm, out, bias, dtype, rows, a_bs, b_bs, alpha,
                   beta, kt_n):
    """Output-stationary blocking for long K: an output block of TM x TN tiles (<= 4 PSUM banks,
    double-buffered) accumulates over K chunks whose A [kc, TM*MT] and B [kc, TN*NT] tiles are
    streamed (two chunks in flight). HBM traffic: A once per N block, B once per M block.
    The repeated unit is one K chunk of one output block. kt_n: the K tiles accumulated (of
    all the summed batches: gemm's sum_batches)."""
    b = ctx.b
    KT, MT, NT = _tile_sizes(ctx.chip, rows)
    isz = itemsize(dtype)
    ktiles = _k_tiles(K, KT, rows, kt_n)
    m_tiles, n_tiles = ceil(M / MT), ceil(N / NT)
    TN = min(n_tiles, 2)
    TM = max(1, min(m_tiles, ctx.chip.psum_banks // 2 // TN))
    kc = max(1, min(kt_n, ctx.chip.gemm_k_chunk_bytes_per_partition
                    // max(2 * (TM * MT + TN * NT) * rows * isz, 1)))
    chunks = ceil(kt_n / kc)
    mb, nb = ceil(m_tiles / TM), ceil(n_tiles / TN)
    total = batch * mb * nb * chunks
    n = ctx.repeat(total, cap=max(2, 900 // max(kc * (2 + 2 * TM * TN), 1)))
    double = rows == 2
    store = ctx.needs_store(out)
    oh = ctx.hbm(out)
    # the bias row broadcast over an M tile's partitions, added while evacuating PSUM (as in
    # gemm): loaded once when all N columns take at most a quarter of the panel budget (the
    # streamed K chunks take up to chip.gemm_k_chunk_bytes_per_partition), else per output block
    bias_whole = bias is not None and N * itemsize(bias.dtype) \
        <= ctx.chip.gemm_panel_budget_bytes_per_partition // 4
    bias_tile = _bias_tile(ctx, bias, MT, 0, N) if bias_whole else None
    accs = {}
    for u in range(n):
        ob, ci = divmod(u, chunks)
        bi, rest = divmod(ob, mb * nb)
        mi, ni = divmod(rest, nb)
        m0, n0 = mi * TM * MT, ni * TN * NT
        mcols, ncols = min(TM * MT, M - m0), min(TN * NT, N - n0)
        if ci == 0:
            accs = {(t, j): ctx.tile(f"kacc{t}_{j}", (min(MT, mcols - t * MT),
                                                      min(NT, ncols - j * NT)),
                                     "float32", ob, Memory.PSUM, bufs=2)
                    for t in range(ceil(mcols / MT)) for j in range(ceil(ncols / NT))}
        for kk in range(ci * kc, min(kt_n, (ci + 1) * kc)):
            bb, k0, kp = ktiles[kk]
            a.base, bm.base = (bi + bb) * a_bs, (bi + bb) * b_bs
            at = as_ap(_load_k_major(ctx, a, False, k0, kp, m0, mcols * rows, dtype,
                                     f"Ak{kk - ci * kc}", u))
            bt = as_ap(_load_k_major(ctx, bm, True, k0, kp, n0, ncols * rows, dtype,
                                     f"Bk{kk - ci * kc}", u))
            for (t, j), acc in accs.items():
                ms, ns = acc.shape
                st = ctx.cols(at, at.p_size, t * MT * rows, ms * rows)
                mv = ctx.cols(bt, bt.p_size, j * NT * rows, ns * rows)
                b.nc_matmul(acc, st, mv, accumulate=kk > 0,
                            perf_mode="double_row" if double else None)
        if ci == chunks - 1:
            if bias is not None and not bias_whole:
                bias_tile = _bias_tile(ctx, bias, MT, n0, ncols, ob)
            for (t, j), acc in accs.items():
                ms, ns = acc.shape
                o = ctx.tile("ko", (ms, ns), out.dtype, t * 2 + j)
                c0 = (n0 if bias_whole else 0) + j * NT
                bias_ap = None if bias_tile is None else bias_tile[0:ms, c0:c0 + ns]
                _evacuate(ctx, o, acc, bias_ap, alpha, beta, (t + j) % 2)
                if store:
                    b.dma_copy(_tile_major(ctx, out, oh, bi, M, N, m0 + t * MT, ms,
                                           n0 + j * NT, ns), o)


def _mm_dims(a: TensorSpec, bt: TensorSpec):
    am, bmat = _mat2d(a), _mat2d(bt)
    M, K = am.rows, am.cols
    if bt.ndim == 1:      # mv: B is a column [K, 1]
        bmat = _Mat(bt, bt.shape[0], 1, bt.strides[0], 1)
    K2, N = bmat.rows, bmat.cols
    if K2 != K:
        raise LoweringError(f"matmul operands do not agree: A {a.shape} x B {bt.shape}")
    return am, bmat, M, K, N


def _batch_stride(t: TensorSpec):
    return t.strides[-3] if t.ndim >= 3 else 0


@lowers("aten::mm", "aten::bmm", "aten::matmul", "aten::mv", "aten::dot", "aten::vdot",
        "aten::inner", "aten::_grouped_mm", "aten::_scaled_mm", "aten::_scaled_mm_v2",
        "aten::_scaled_grouped_mm", reads=reads.k_major(0))
def mm(ctx, op):
    a, bt = op.inputs[0], op.inputs[1]
    if a.ndim == 1 and bt.ndim == 1:       # dot
        a = TensorSpec((1, a.shape[0]), a.dtype, (a.shape[0], a.strides[0]), a.id)
    am, bmat, M, K, N = _mm_dims(a, bt)
    gemm(ctx, prod(op.outputs[0].shape[:-2]), M, K, N, am, bmat, op.outputs[0],
         a_batch_stride=_batch_stride(a), b_batch_stride=_batch_stride(bt))


@lowers("aten::addmm", "aten::baddbmm", "aten::addmv", "aten::addbmm", reads=reads.k_major(1))
def addmm(ctx, op):
    bias, a, bt = op.inputs[0], op.inputs[1], op.inputs[2]
    am, bmat, M, K, N = _mm_dims(a, bt)
    # a bias broadcast along rows is added while evacuating PSUM; a full [M, N] input costs as
    # much (one PSUM + SBUF pass) but must be loaded: charged through the bias tile's DMA
    alpha, beta = addmm_scales(op)
    gemm(ctx, prod(a.shape[:-2]), M, K, N, am, bmat, op.outputs[0], bias=bias,
         a_batch_stride=_batch_stride(a), b_batch_stride=_batch_stride(bt), alpha=alpha,
         beta=beta, sum_batches=op.op == "aten::addbmm")


def addmm_scales(op) -> tuple:
    """(alpha, beta) of an addmm-family op: out = beta * input + alpha * (A @ B)."""
    return op.arg(4, op.kwargs.get("alpha", 1)), op.arg(3, op.kwargs.get("beta", 1))


@lowers("aten::linear", reads=reads.k_major(0, batched=False))
def linear(ctx, op):
    x, w = op.inputs[0], op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    M = x.numel // x.shape[-1]
    K, N = x.shape[-1], w.shape[0]
    am = _Mat(x, M, K, x.strides[-1] * K if x.is_contiguous else x.strides[-2], x.strides[-1])
    bmat = _Mat(w, K, N, w.strides[1], w.strides[0])   # W.T view: K rows (stride 1), N cols
    gemm(ctx, 1, M, K, N, am, bmat, op.outputs[0], bias=bias)


def _conv_gemm_dims(w: TensorSpec, out: TensorSpec):
    """Implicit GEMM: M = output pixels x batch, K = Cin/groups x kernel, N = Cout; and the
    kernel's taps (kh * kw: the input columns each loaded element serves)."""
    cout = w.shape[0]
    taps = max(1, (w.numel // max(cout, 1)) // max(w.shape[1], 1))
    return out.numel // max(cout, 1), prod(w.shape[1:]), cout, taps


@lowers("aten::convolution", "aten::_convolution", "aten::conv2d", "aten::conv1d",
        "aten::conv3d", "aten::_slow_conv2d_forward", "aten::mkldnn_convolution",
        "aten::cudnn_convolution", "aten::thnn_conv2d")
def convolution(ctx, op):
    """As a GEMM over im2col patches laid out with channels on partitions (the compiler's
    layout); the patch gather is not charged separately (it overlaps as strided DMA)."""
    x, w, out = op.inputs[0], op.inputs[1], op.outputs[0]
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2].ndim == 1 else None
    M, K, N, taps = _conv_gemm_dims(w, out)
    a = TensorSpec((M, K), x.dtype, (1, M), x.id)          # K-major: natural loads
    bsp = TensorSpec((K, N), w.dtype, (N, 1), w.id)
    gemm(ctx, 1, M, K, N, _Mat(a, M, K, 1, M, reuse=taps), _Mat(bsp, K, N, N, 1), out,
         bias=bias)


@lowers("aten::convolution_backward", "aten::_slow_conv2d_backward",
        "aten::mkldnn_convolution_backward")
def convolution_backward(ctx, op):
    """grad_input (a GEMM of the forward's size, transposed weights) and grad_weight (a GEMM
    contracting over the output pixels)."""
    gout, x, w = op.inputs[0], op.inputs[1], op.inputs[2]
    M, K, N, taps = _conv_gemm_dims(w, gout)
    outs = [o for o in op.outputs if o is not None and o.numel > 0]
    gi = outs[0] if outs else x
    a = TensorSpec((M, N), gout.dtype, (1, M), gout.id)
    wt = TensorSpec((N, K), w.dtype, (K, 1), w.id)
    gemm(ctx, 1, M, N, K, _Mat(a, M, N, 1, M), _Mat(wt, N, K, K, 1),
         TensorSpec((M, K), gi.dtype, None, ("gi", gi.id)))
    xs = TensorSpec((M, K), x.dtype, (K, 1), x.id)
    go = TensorSpec((M, N), gout.dtype, (N, 1), ("go", gout.id))
    gw = outs[1] if len(outs) > 1 else w
    gemm(ctx, 1, K, M, N, _Mat(xs, K, M, 1, K, reuse=taps), _Mat(go, M, N, N, 1),
         TensorSpec((K, N), gw.dtype, None, ("gw", gw.id)))
