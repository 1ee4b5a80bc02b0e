"""Fused scaled-dot-product attention (what `F.scaled_dot_product_attention` runs on the device:
the CPU flash kernels `_scaled_dot_product_flash_attention_for_cpu` and its backward) as a
flash-attention kernel on one NeuronCore.

Forward, per (batch, head) and QT-row query tile (`_tiles`) [FlashAttn][NKI flash_fwd]:
- Q^T [D, QT] and, once per (batch, head), K^T [D, S] and V [S, D] in SBUF (the D-contiguous
  operands transposed on the way in, as matmul.py's `_load_k_major` does for any K-major operand).
- per KT-column key tile: S = Q K^T on TensorE into one PSUM bank; causal diagonal tiles masked
  by `affine_select` on GpSimd (tiles wholly above the diagonal are skipped, the last one is cut
  to the needed columns); an attn_mask tile is added on VectorE.
- online softmax: row max (VectorE), new running max, exp(scale*S - scale*max) with the row sum
  free on ScalarE [ISAcost], exp of the max change (the correction) on ScalarE.
- P^T through TensorE transposes (PSUM -> SBUF copies alternate VectorE / ScalarE), O += P V on
  TensorE, the running output rescaled by the correction on VectorE.
- 1/sum, output cast and store; logsumexp (scale*max + log sum) stored per row.
Backward (recomputation, q-tile outer): per query tile D_i = rowsum(dO * O), then per key tile
S = Q K^T, P = exp(scale*S - lse), dP = dO V^T, dS = P (dP - D_i); dV += P^T dO and dK += dS^T Q
(P and dS are already K-major: no transpose), accumulated over query tiles in SBUF on VectorE;
dQ += dS K through a TensorE transpose of dS, accumulated in PSUM. FLOPs: forward 4 S_q S_k D per
head, backward 10 S_q S_k D (about half of each with a causal mask).
Grouped-query attention (K/V with H_kv heads, each serving H / H_kv consecutive query heads, as
`enable_gqa`): the query heads of a group run one after another on the same resident K/V, so each
K/V head is loaded once per group; the backward accumulates dK/dV over the whole group and stores
them once."""

from __future__ import annotations

from functools import partial
from math import ceil

from ...numerics.formats import itemsize
from ...program.ap import AccessPattern, Memory, as_ap
from .. import reads
from ..registry import LoweringError, lowers
from .matmul import _load_k_major, _Mat


def _names(*names):
    return {name: i for i, name in enumerate(names)}


# Each op's argument positions, as its ATen schema orders them: the CPU, CUDA and PrivateUse1
# (what torch.compile's graphs on the device hold) forms differ. attn_mask is the overrideable
# forms' attn_bias.
_FORWARD = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": _names(
        "query", "key", "value", "dropout_p", "is_causal", "attn_mask", "scale"),
    "aten::_scaled_dot_product_flash_attention": _names(
        "query", "key", "value", "dropout_p", "is_causal", "return_debug_mask", "scale"),
    "aten::_scaled_dot_product_fused_attention_overrideable": _names(
        "query", "key", "value", "attn_mask", "dropout_p", "is_causal", "return_debug_mask",
        "scale"),
}
_BACKWARD = {
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _names(
        "grad_out", "query", "key", "value", "out", "logsumexp", "dropout_p", "is_causal",
        "attn_mask", "scale"),
    "aten::_scaled_dot_product_flash_attention_backward": _names(
        "grad_out", "query", "key", "value", "out", "logsumexp", "cum_seq_q", "cum_seq_k",
        "max_q", "max_k", "dropout_p", "is_causal", "philox_seed", "philox_offset", "scale"),
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": _names(
        "grad_out", "query", "key", "value", "attn_mask", "grad_input_mask", "out", "logsumexp",
        "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p", "is_causal", "philox_seed",
        "philox_offset", "scale"),
}
_POSITIONS = {**_FORWARD, **_BACKWARD}


def _arg(op, name):
    """Argument `name` of an attention op (None where its form has no such argument)."""
    at = _POSITIONS[op.op].get(name)
    return None if at is None else op.arg(at)


def _tiles(ctx):
    """(NP, QT, KT): partitions (the head-dim and key chunks TensorE contracts over), query rows
    per tile (the stationary columns of Q^T), key columns per score tile (one FP32 PSUM bank)."""
    return ctx.P, ctx.chip.matmul_stationary_fmax, ctx.chip.psum_bank_fp32_elems


def _buf(ctx, role, shape, dtype, slot, memory=Memory.SBUF, bufs=None):
    """A rotating [NP, F] tile (4 SBUF / 2 PSUM buffers) used as [shape]: F is the smallest of
    1, QT, KT or a multiple of NP that holds shape[1] (PSUM: QT or a whole bank), so
    trimmed causal and tail tiles reuse the same buffers (the pool would otherwise allocate one
    per distinct shape and run PSUM out)."""
    f = shape[1]
    NP, QT, KT = _tiles(ctx)
    full = 1 if f <= 1 else QT if f <= QT else KT if f <= KT else NP * ceil(f / NP)
    if memory == Memory.PSUM and 1 < f <= KT:
        full = QT if f <= QT else KT
    bufs = bufs or (2 if memory == Memory.PSUM else 4)
    return ctx.cols(ctx.tile(role, (NP, full), dtype, slot, memory, bufs=bufs), shape[0], 0, f)


def _kv_head(t, bh, heads):
    """(batch, head) of t serving query (batch, head) bh: t has H or (GQA) H_kv heads."""
    b, h = divmod(bh, heads)
    return b, h // max(1, heads // max(t.shape[1], 1))


def _head_base(t, bh, heads):
    """Element offset of (batch, head) bh of a [B, H, S, D] tensor (GQA: H_kv divides H)."""
    b, hk = _kv_head(t, bh, heads)
    return b * t.strides[0] + hk * t.strides[1]


def _head_rows(ctx, t, base, r0, rn, d):
    """Rows [r0, r0+rn) (d elements each) of the [S, D] head at element `base` of t, in HBM,
    one per partition."""
    return AccessPattern(ctx.hbm(t), 0, rn, base + r0 * t.strides[-2], ((d, t.strides[-1]),),
                         max(t.strides[-2], 1))


def _rows(ctx, t, base, r0, rn, dtype, role, slot):
    """Rows [r0, r0+rn) of a [S, D] head as an SBUF tile [rn, D] (natural layout)."""
    tile = ctx.tile(role, (rn, t.shape[-1]), dtype, slot)
    ctx.in_hbm(t)
    ctx.b.dma_copy(tile, _head_rows(ctx, t, base, r0, rn, t.shape[-1]))
    return tile


def _km(ctx, t, base, d0, r0, rn, dtype, role, slot):
    """Rows [r0, r0+rn) of a [S, D] head transposed: [D, rn] with D on partitions."""
    NP = ctx.P
    D = t.shape[-1]
    m = _Mat(t, t.shape[-2], D, t.strides[-2], t.strides[-1], base + d0)
    return as_ap(_load_k_major(ctx, m, False, 0, min(NP, D - d0), r0, rn, dtype, role, slot))


def _kv_end(causal, q0, qn, S_k):
    """Key columns a query tile needs: all, or up to its last row with a causal mask."""
    return min(S_k, q0 + qn) if causal else S_k


def _blocks(n_bh, nq, causal):
    """(bh, [query tiles]) blocks of two query tiles whose kv loops are interleaved (so the
    engines overlap one tile's softmax with the other's matmuls, as a compiler schedules them);
    causal tiles paired i with nq-1-i, so every block has the same work."""
    if causal and nq > 1:
        pairs = [(i, nq - 1 - i) for i in range(nq // 2)] + [(nq // 2,)] * (nq % 2)
    else:
        pairs = [tuple(range(i, min(i + 2, nq))) for i in range(0, nq, 2)]
    return [(bh, tiles) for bh in range(n_bh) for tiles in pairs]


def _lanes(items, steps, lanes=2):
    """Software pipelining: `lanes` query tiles in flight, their kv loops run round-robin one
    stage at a time (a lane that finishes takes the next tile), so one tile's softmax overlaps
    the other's matmuls as a compiler schedules them, short causal tiles included."""
    todo = iter(items)
    active = [steps(it, lane) for lane, it in zip(range(lanes), todo)]
    while any(g is not None for g in active):
        for lane, g in enumerate(active):
            if g is not None and next(g, StopIteration) is StopIteration:
                nxt = next(todo, None)
                active[lane] = None if nxt is None else steps(nxt, lane)


def _kv_steps(kv_end, KT, idx, step):
    """A query tile's key tiles, software-pipelined: `step(slot, k0, kn)` emits a key tile's
    scores and softmax and returns its TensorE products, emitted after the next tile's step so
    TensorE computes those scores while this softmax runs; yields per key tile (`_lanes`)."""
    pending = None
    for t, k0 in enumerate(range(0, kv_end, KT)):
        products = step(2 * (t % 2) + idx, k0, min(KT, kv_end - k0))
        if pending is not None:
            pending()
        pending = products
        yield
    pending()


def _times_transposed(ctx, acc_ps, x, qn, kn, rows, c0, dt, role, ps_slot, slot, copy, add):
    """acc_ps [qn, D] = (add: +=) x @ rows[c0:]: x [qn, kn] transposed by TensorE (the key
    chunks side by side in one PSUM bank, one `copy` out to SBUF), one matmul per key chunk."""
    NP, b, D = ctx.P, ctx.b, acc_ps.free_size
    nch, pr = ceil(kn / NP), min(NP, kn)
    tp = _buf(ctx, f"{role}_ps", (pr, nch * qn), "float32", ps_slot, Memory.PSUM)
    for c in range(nch):
        b.nc_transpose(ctx.cols(tp, min(NP, kn - NP * c), c * qn, qn),
                       ctx.cols(x, qn, NP * c, min(NP, kn - NP * c)))
    xT = _buf(ctx, role, (pr, nch * qn), dt, slot)
    copy(xT, tp)
    for c in range(nch):
        cn = min(NP, kn - NP * c)
        b.nc_matmul(acc_ps, ctx.cols(xT, cn, c * qn, qn), ctx.cols(rows[c0 + c], cn, 0, D),
                    accumulate=add or c > 0)


class _Heads:
    """K/V tiles of the (batch, K/V head)s in flight (two at most: lanes cross a head boundary);
    the query heads of a GQA group share them."""

    def __init__(self, ctx, k, v, H, dt, need, slots):
        self.ctx, self.k, self.v, self.H, self.dt = ctx, k, v, H, dt
        self.need, self.loaded, self.count, self.slots = need, {}, 0, slots

    def key(self, bh):
        return _kv_head(self.k, bh, self.H)

    def get(self, bh, *names):
        key = self.key(bh)
        if key not in self.loaded:
            if len(self.loaded) >= self.slots:
                self.loaded.pop(next(iter(self.loaded)))
            self.count += 1
            self.loaded[key] = self._load(bh, self.count % self.slots)
        return tuple(self.loaded[key][x] for x in names)

    def _load(self, bh, slot):
        """The `need`ed tiles of bh's K/V head: K^T / V^T [D, S_k] chunks (D on partitions),
        K / V [NP, D] rows, D the tensor's own head size (V's may differ from K's)."""
        ctx, NP, S_k, dt = self.ctx, self.ctx.P, self.k.shape[-2], self.dt
        out = {}
        for name in self.need:
            t = self.k if name[0] == "k" else self.v
            base = _head_base(t, bh, self.H)
            if name.endswith("T"):
                out[name] = [_km(ctx, t, base, d0, 0, S_k, dt, f"{name}{d0 // NP}", slot)
                             for d0 in range(0, t.shape[-1], NP)]
            else:
                out[name] = [_rows(ctx, t, base, r0, min(NP, S_k - r0), dt,
                                   f"{name}r{r0 // NP}", slot) for r0 in range(0, S_k, NP)]
        return out


def _head_slots(chip, per_head, S_k, D, what):
    """Heads resident at once: two (lanes cross a head boundary without waiting) when they fit
    chip.attention_head_sbuf_bytes_per_partition, else one (the next head's loads wait for the
    last reads of the previous one)."""
    budget = chip.attention_head_sbuf_bytes_per_partition
    if per_head > budget:
        raise LoweringError(
            f"attention {what} with {S_k} keys and head size {D} keeps {per_head // 1024} KiB "
            f"per partition resident per head (K, V and, backward, the dK/dV sums); this rule "
            f"keeps at most {budget // 1024} KiB, so the op is timed by the roofline "
            f"estimate. Key-blocked passes for longer sequences are not written yet")
    return 2 if 2 * per_head <= budget else 1


def _plan(ctx, op):
    """Arguments and blocks of either direction: q, k, v, is_causal, attn_mask, scale; the blocks
    this core emits (ctx.repeat)."""
    _, QT, KT = _tiles(ctx)
    q, k, v = (_arg(op, name) for name in ("query", "key", "value"))
    mask = _arg(op, "attn_mask")
    mask = mask if hasattr(mask, "shape") and mask.on_device else None
    B, H, S_q, D = q.shape
    if k.shape[1] != v.shape[1] or k.shape[1] < 1 or H % k.shape[1]:
        raise LoweringError(
            f"attention with {H} query heads and K/V of {k.shape[1]}/{v.shape[1]} heads: K and "
            f"V need one head count dividing {H} (grouped-query attention); this op is timed by "
            f"the roofline estimate")
    scale = _arg(op, "scale")
    causal = bool(_arg(op, "is_causal"))
    blocks = _blocks(B * H, ceil(S_q / QT), causal)
    # >= 4 blocks (the half-size build has 2): both pipeline lanes busy in both builds
    per_block = 2 * ceil(k.shape[-2] / KT) * 30
    n = ctx.repeat(len(blocks), cap=max(4, 1800 // per_block))
    mm_dtype = q.dtype if q.dtype in ("bfloat16", "float16") else "float32"
    # the query tiles of the first n blocks as (tile number, bh, tile index)
    items = [(t, bh, i) for t, (bh, i) in enumerate(
        (bh, i) for bh, tiles in blocks[:n] for i in tiles)]
    return q, k, v, causal, mask, float(scale) if scale else D ** -0.5, items, mm_dtype


def _mask_add(ctx, s_sb, mask, bh, heads, q0, qn, k0, kn, slot):
    """s += attn_mask[b, h, q0:q0+qn, k0:k0+kn] (broadcast dims have stride 0)."""
    b, h = divmod(bh, heads)
    st = list(mask.strides)
    while len(st) < 4:
        st.insert(0, 0)
    sh = (1,) * (4 - mask.ndim) + tuple(mask.shape)
    off = (b if sh[0] > 1 else 0) * st[0] + (h if sh[1] > 1 else 0) * st[1] \
        + (q0 if sh[2] > 1 else 0) * st[2] + (k0 if sh[3] > 1 else 0) * st[3]
    mt = ctx.tile("mask", (qn, kn), mask.dtype if mask.dtype != "bool" else "uint8", slot)
    ctx.b.dma_copy(mt, AccessPattern(ctx.in_hbm(mask), 0, qn, off,
                                     ((kn, st[3] if sh[3] > 1 else 0),),
                                     st[2] if sh[2] > 1 else 0))
    ctx.b.tensor_tensor(s_sb, s_sb, mt, "add")


def _scores(ctx, qT, kT, k0, kn, D, qn, causal, q0, mask, bh, heads, slot, scale, ps_bufs=2):
    """S = Q K^T for one key tile in PSUM, masked into SBUF FP32 [qn, kn] (scaled when masked)."""
    NP = ctx.P
    b = ctx.b
    ps = _buf(ctx, "s_ps", (qn, kn), "float32", slot, Memory.PSUM, ps_bufs)
    for d0 in range(0, D, NP):
        dn = min(NP, D - d0)
        b.nc_matmul(ps, ctx.cols(qT[d0 // NP], dn, 0, qn), ctx.cols(kT[d0 // NP], dn, k0, kn),
                    accumulate=d0 > 0)
    src, pre_scaled = ps, False
    if mask is not None:
        s_sb = _buf(ctx, "s_sb", (qn, kn), "float32", slot)
        b.tensor_scalar(s_sb, ps, "multiply", scale)
        _mask_add(ctx, s_sb, mask, bh, heads, q0, qn, k0, kn, slot)
        src, pre_scaled = s_sb, True
    if causal and k0 + kn > q0:            # diagonal tile: keep key <= query
        if not pre_scaled:                 # GpSimd has no PSUM port: a copy on ScalarE
            s_sb = _buf(ctx, "s_sb", (qn, kn), "float32", slot)
            b.activation(s_sb, ps, "copy")
            src = s_sb
        b.affine_select(src, src, -3.0e38, channel_multiplier=1, pattern=((-1, kn),),
                        offset=q0 - k0, cmp_op="greater_equal")
    return src, pre_scaled


@lowers(*_FORWARD, reads=reads.HEADS)
def sdpa_forward(ctx, op):
    NP, QT, KT = _tiles(ctx)
    q, k, v, causal, mask, scale, items, dt = _plan(ctx, op)
    out = op.outputs[0]
    lse = op.outputs[1] if len(op.outputs) > 1 else None
    B, H, S_q, D = q.shape
    S_k, Ev = k.shape[-2], v.shape[-1]      # Ev: V's head size, the output's
    b = ctx.b
    per_head = (ceil(D / NP) * S_k + ceil(S_k / NP) * Ev) * itemsize(dt)
    heads = _Heads(ctx, k, v, H, dt, ("kT", "v"),
                   _head_slots(ctx.chip, per_head, S_k, D, "forward"))

    def tile_steps(item, idx):
        j, bh, i = item
        kT, vr = heads.get(bh, "kT", "v")
        bq = _head_base(q, bh, H)
        q0 = i * QT
        qn = min(QT, S_q - q0)
        qT = [_km(ctx, q, bq, d0, q0, qn, dt, f"qT{d0}", 2 * j + idx) for d0 in range(0, D, NP)]
        sl = 2 * (j % 2) + idx
        m = _buf(ctx, "m", (qn, 1), "float32", sl)
        l = _buf(ctx, "l", (qn, 1), "float32", sl)  # noqa: E741
        acc = _buf(ctx, "acc", (qn, Ev), "float32", sl)
        b.memset(m, -3.0e38)
        b.memset(l, 0.0)
        b.memset(acc, 0.0)
        kv_end = _kv_end(causal, q0, qn, S_k)

        def pv(t, k0, kn, p, corr):
            o_ps = _buf(ctx, "o_ps", (qn, Ev), "float32", t, Memory.PSUM)
            _times_transposed(ctx, o_ps, p, qn, kn, vr, k0 // NP, dt, "pT", idx, t,
                              b.activation if idx % 2 else b.tensor_copy, False)
            b.tensor_tensor(acc, acc, corr, "multiply", engine="gpsimd")
            b.tensor_tensor(acc, acc, o_ps, "add")

        def step(t, k0, kn):
            nonlocal m
            # scores of this key tile in their own PSUM bank (4: two lanes x two steps)
            s, pre = _scores(ctx, qT, kT, k0, kn, D, qn, causal, q0, mask, bh, H, t, scale, 4)
            sc = 1.0 if pre else scale
            mt = _buf(ctx, "mt", (qn, 1), "float32", t)
            b.tensor_reduce(mt, s, "maximum")
            # the running max stays in unscaled units: scale folds into the exps' scale/bias
            mn = _buf(ctx, "mn", (qn, 1), "float32", t)
            b.tensor_tensor(mn, mt, m, "maximum")
            negm = _buf(ctx, "negm", (qn, 1), "float32", t)
            b.tensor_scalar(negm, mn, "multiply", -sc, engine="gpsimd")
            corr = _buf(ctx, "corr", (qn, 1), "float32", t)
            b.activation(corr, m, "exp", bias=negm, scale=sc)  # exp(sc * (m_old - m_new))
            m = mn                                  # the max buffers alternate: no copy
            p = _buf(ctx, "p", (qn, kn), dt, t)
            rs = _buf(ctx, "rs", (qn, 1), "float32", t)
            b.activation(p, s, "exp", bias=negm, scale=sc, reduce_res=rs)
            # small per-row updates on GpSimd, idle otherwise
            b.tensor_tensor(l, l, corr, "multiply", engine="gpsimd")
            b.tensor_tensor(l, l, rs, "add", engine="gpsimd")
            return partial(pv, t, k0, kn, p, corr)

        yield from _kv_steps(kv_end, KT, idx, step)
        rl = _buf(ctx, "rl", (qn, 1), "float32", sl)
        b.activation(rl, l, "reciprocal")
        o = _buf(ctx, "o", (qn, Ev), out.dtype, sl)
        b.tensor_tensor(o, acc, rl, "multiply")
        b.dma_copy(_head_rows(ctx, out, _head_base(out, bh, H), q0, qn, Ev), o)
        if lse is not None and lse.numel >= B * H * S_q:
            lt = _buf(ctx, "lse", (qn, 1), "float32", sl)
            b.activation(lt, l, "log")
            b.tensor_scalar(m, m, "multiply", scale if mask is None else 1.0, engine="gpsimd")
            b.tensor_tensor(lt, lt, m, "add")
            b.dma_copy(AccessPattern(ctx.hbm(lse), 0, qn, bh * S_q + q0, ((1, 1),), 1), lt)
    _lanes(items, tile_steps)
    ctx.end_op()


@lowers(*_BACKWARD, reads=reads.HEADS)
def sdpa_backward(ctx, op):
    NP, QT, KT = _tiles(ctx)
    g, o, lse = (_arg(op, name) for name in ("grad_out", "out", "logsumexp"))
    q, k, v, causal, mask, scale, items, dt = _plan(ctx, op)
    B, H, S_q, D = q.shape
    S_k, Ev = k.shape[-2], v.shape[-1]      # Ev: V's head size, dO's and dV's
    nk = ceil(S_k / NP)
    b = ctx.b
    dq, dk, dv = (op.outputs + (None,) * 3)[:3]
    # per partition: dK, dV FP32 accumulators and K^T, V^T, K of a head
    per_head = nk * (D + Ev) * 4 + ((ceil(D / NP) + ceil(Ev / NP)) * S_k + nk * D) * itemsize(dt)
    slots = _head_slots(ctx.chip, per_head, S_k, D, "backward")

    def flush(bh, accs):                        # dK (scaled), dV of a finished K/V head
        for name, acc, t, w in (("dk", accs[0], dk, D), ("dv", accs[1], dv, Ev)):
            if t is None or t.numel == 0:
                continue
            base = _head_base(t, bh, H)
            for c in range(nk):
                cn = min(NP, S_k - c * NP)
                ot = _buf(ctx, f"{name}_o", (cn, w), t.dtype, c)
                if name == "dk":
                    b.activation(ot, ctx.cols(acc, cn, c * w, w), "copy", scale=scale)
                else:
                    b.tensor_copy(ot, ctx.cols(acc, cn, c * w, w), engine="gpsimd")
                b.dma_copy(_head_rows(ctx, t, base, c * NP, cn, w), ot)

    heads = _Heads(ctx, k, v, H, dt, ("kT", "vT", "k"), slots)
    left = {}                                   # query tiles left per K/V head (GQA: its group)
    for _, bh, _ in items:
        left[heads.key(bh)] = left.get(heads.key(bh), 0) + 1
    dkv = {}

    def tile_steps(item, idx):
        j, bh, i = item
        kT, vT, kr = heads.get(bh, "kT", "vT", "k")
        kv = heads.key(bh)
        if kv not in dkv:
            # dK, dV of a head accumulate in SBUF FP32: [NP, nk * D], key chunk c at c * D
            sl = heads.count % slots
            dkv[kv] = (_buf(ctx, "dk_acc", (NP, nk * D), "float32", sl),
                       _buf(ctx, "dv_acc", (NP, nk * Ev), "float32", sl))
            for acc in dkv[kv]:
                b.memset(acc, 0.0, engine="gpsimd")
        sl = 2 * (j % 2) + idx
        q0 = i * QT
        qn = min(QT, S_q - q0)
        bq, bg = _head_base(q, bh, H), _head_base(g, bh, H)
        qT = [_km(ctx, q, bq, d0, q0, qn, dt, f"qT{d0}", 2 * j + idx) for d0 in range(0, D, NP)]
        gT = [_km(ctx, g, bg, d0, q0, qn, dt, f"gT{d0}", 2 * j + idx) for d0 in range(0, Ev, NP)]
        qr = _rows(ctx, q, bq, q0, qn, dt, "qr", 2 * j + idx)
        gr = _rows(ctx, g, bg, q0, qn, dt, "gr", 2 * j + idx)
        orr = _rows(ctx, o, _head_base(o, bh, H), q0, qn, o.dtype, "or", 2 * j + idx)
        lt = _buf(ctx, "lse", (qn, 1), "float32", sl)
        b.dma_copy(lt, AccessPattern(ctx.in_hbm(lse), 0, qn, bh * S_q + q0, ((1, 1),), 1))
        nlse = _buf(ctx, "nlse", (qn, 1), "float32", sl)
        b.tensor_scalar(nlse, lt, "multiply", -1.0, engine="gpsimd")
        di = _buf(ctx, "di", (qn, 1), "float32", sl)
        go = _buf(ctx, "go", (qn, Ev), "float32", sl)
        b.tensor_tensor(go, gr, orr, "multiply", engine="gpsimd")
        b.tensor_reduce(di, go, "add")
        dq_ps = _buf(ctx, "dq_ps", (qn, D), "float32", idx, Memory.PSUM)
        kv_end = _kv_end(causal, q0, qn, S_k)

        def grads(k0, kn, p, ds, t):
            nch = ceil(kn / NP)
            pr = min(NP, kn)
            c0 = k0 // NP
            # dV += P^T dO, dK += dS^T Q: P and dS are K-major already; the key chunks'
            # products side by side in one PSUM bank, one VectorE add into the accumulator
            for lhs, rhs, acc, w in ((p, gr, dkv[kv][1], Ev), (ds, qr, dkv[kv][0], D)):
                per_bank = max(1, KT // w)     # [NP, w] FP32 products per 2 KiB PSUM bank
                for g0 in range(0, nch, per_bank):
                    gn = min(per_bank, nch - g0)
                    ps = _buf(ctx, "kv_ps", (pr, gn * w), "float32", 0, Memory.PSUM)
                    for c in range(g0, g0 + gn):
                        cn = min(NP, kn - NP * c)
                        b.nc_matmul(ctx.cols(ps, cn, (c - g0) * w, w),
                                    ctx.cols(lhs, qn, NP * c, cn), ctx.cols(rhs, qn, 0, w))
                    dst = ctx.cols(acc, pr, (c0 + g0) * w, gn * w)
                    b.tensor_tensor(dst, dst, ps, "add")
            # dQ += dS K
            _times_transposed(ctx, dq_ps, ds, qn, kn, kr, c0, dt, "dsT", 0, t, b.activation,
                              k0 > 0)

        def step(t, k0, kn):
            s, pre = _scores(ctx, qT, kT, k0, kn, D, qn, causal, q0, mask, bh, H, t, scale)
            p = _buf(ctx, "p", (qn, kn), dt, t)
            b.activation(p, s, "exp", bias=nlse, scale=1.0 if pre else scale)
            dp = _buf(ctx, "dp_ps", (qn, kn), "float32", t, Memory.PSUM)
            for d0 in range(0, Ev, NP):        # dP = dO V^T: a sum over V's head size
                dn = min(NP, Ev - d0)
                b.nc_matmul(dp, ctx.cols(gT[d0 // NP], dn, 0, qn),
                            ctx.cols(vT[d0 // NP], dn, k0, kn), accumulate=d0 > 0)
            ds = _buf(ctx, "ds", (qn, kn), dt, t)
            b.tensor_tensor(ds, dp, di, "subtract")
            b.tensor_tensor(ds, ds, p, "multiply")
            return partial(grads, k0, kn, p, ds, t)

        yield from _kv_steps(kv_end, KT, idx, step)
        if dq is not None and dq.numel:
            dqt = _buf(ctx, "dq_o", (qn, D), dq.dtype, sl)
            b.activation(dqt, dq_ps, "copy", scale=scale)
            b.dma_copy(_head_rows(ctx, dq, _head_base(dq, bh, H), q0, qn, D), dqt)
        left[kv] -= 1
        if left[kv] == 0:
            flush(bh, dkv.pop(kv))
    _lanes(items, tile_steps)
    ctx.end_op()
