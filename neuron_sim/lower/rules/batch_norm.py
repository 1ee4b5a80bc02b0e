"""Batch norm (+ backward): channels on partitions.

Each channel is a row of its N x spatial elements, read from the NCHW tensor by DMA access
patterns (partition stride HW, runs of HW at stride C x HW); statistics by `bn_stats` per
chunk of <= chip.bn_stats_free_elems_max elements and `bn_aggr` per channel [ISAcost]; the
per-channel affine folds into the scale and bias of one ScalarE activation per chunk (free)."""

from __future__ import annotations

from math import ceil

from ...numerics.formats import itemsize
from ...program.ap import AccessPattern
from ..context import BUFS
from ..registry import lowers
from ..spec import TensorSpec
from .elementwise import stt
from .norm import _grad_outputs


def _batch_norm_args(op):
    """(running_mean, running_var, training, momentum, eps) from the batch norms' schemas:
    `.no_stats` has no running statistics, the `_no_training` / `_no_update` ops no training
    flag (they evaluate), `_batch_norm_with_update` none (it trains)."""
    rest = list(op.args[3:])
    stats = [None, None]
    if not (rest and isinstance(rest[0], bool)):
        stats, rest = [t if isinstance(t, TensorSpec) else None for t in rest[:2]], rest[2:]
    if rest and isinstance(rest[0], bool):
        training, rest = rest[0], rest[1:]
    else:
        training = op.op == "aten::_batch_norm_with_update"
    num = [a if isinstance(a, (int, float)) and not isinstance(a, bool) else None
           for a in rest[:2]] + [None, None]
    return (*stats, training, 0.1 if num[0] is None else num[0],
            1e-5 if num[1] is None else num[1])


def _channel_chunks(N, HW, fmax):
    """A channel's N x HW elements as chunks of <= fmax: (n0, images, h0, elements a run)."""
    if HW <= fmax:
        k = fmax // HW
        return [(n0, min(k, N - n0), 0, HW) for n0 in range(0, N, k)]
    return [(n, 1, h0, min(fmax, HW - h0)) for n in range(N) for h0 in range(0, HW, fmax)]


class _Channels:
    """x's channels (dim 1) on partitions: blocks of ctx.P channels, each channel's N x HW
    elements in chunks (_channel_chunks); the DMA access patterns of a chunk and of a [C]
    vector's channels (one per partition)."""

    def __init__(self, ctx, x: TensorSpec):
        self.ctx = ctx
        self.N, self.C = (x.shape[0], x.shape[1]) if x.ndim >= 2 else (1, max(x.numel, 1))
        self.HW = x.numel // max(self.N * self.C, 1)
        self.L = self.N * self.HW                 # elements a channel
        self.chunks = _channel_chunks(self.N, self.HW, ctx.chip.row_piece_elems)

    def blocks(self):
        """(block, first channel, channels) of the blocks this core emits."""
        P = self.ctx.P
        for blk in range(self.ctx.repeat(ceil(self.C / P))):
            yield blk, blk * P, min(P, self.C - blk * P)

    def ap(self, t: TensorSpec, c0, pc, chunk) -> AccessPattern:
        n0, kn, h0, hn = chunk
        C, HW = self.C, self.HW
        return AccessPattern(self.ctx.hbm(t), 0, pc, n0 * C * HW + c0 * HW + h0,
                             ((kn, C * HW), (hn, 1)), HW)

    def load(self, t: TensorSpec, c0, pc, k, role, slot, bufs=BUFS):
        n0, kn, h0, hn = self.chunks[k]
        tile = self.ctx.tile(role, (pc, kn * hn), t.dtype, slot, bufs=bufs)
        self.ctx.in_hbm(t)
        self.ctx.b.dma_copy(tile, self.ap(t, c0, pc, self.chunks[k]))
        return tile

    def column(self, t: TensorSpec, c0, pc, role):
        tile = self.ctx.tile(role, (pc, 1), t.dtype, c0 // self.ctx.P)
        self.ctx.b.dma_copy(tile, AccessPattern(self.ctx.in_hbm(t), 0, pc, c0, ((1, 1),), 1))
        return tile

    def store_column(self, t: TensorSpec, v, c0, pc, role):
        """[pc, 1] FP32 values into channels c0.. of t (cast first: a DMA does not convert)."""
        if t.dtype != "float32":
            o, v = v, self.ctx.tmp(role, (pc, 1), t.dtype, c0 // self.ctx.P)
            self.ctx.b.tensor_copy(v, o)
        self.ctx.b.dma_copy(AccessPattern(self.ctx.hbm(t), 0, pc, c0, ((1, 1),), 1), v)


@lowers("aten::native_batch_norm", "aten::_native_batch_norm_legit",
        "aten::_native_batch_norm_legit_no_training", "aten::batch_norm",
        "aten::_batch_norm_with_update", "aten::_native_batch_norm_legit_functional",
        "aten::_batch_norm_no_update")
def batch_norm(ctx, op):
    """Training: bn_stats per chunk and bn_aggr per channel give the batch mean and (biased)
    variance, saved as mean and invstd; the running statistics are updated in place,
    (1 - momentum) * running + momentum * batch (the variance unbiased: x N HW / (N HW - 1)),
    on VectorE over [C, 1]. Evaluation: the running statistics normalise. Either way the
    per-channel affine folds into one ScalarE activation per chunk, scale = w * invstd and
    bias = b - mean * scale. A channel block whose elements fit SBUF stays loaded between
    the statistics and the normalisation; a bigger one is read twice from HBM."""
    x, out = op.inputs[0], op.outputs[0]
    weight, bias = (op.arg(i) if isinstance(op.arg(i), TensorSpec) else None for i in (1, 2))
    rmean, rvar, training, momentum, eps = _batch_norm_args(op)
    training = training or rmean is None or rvar is None
    b = ctx.b
    ch = _Channels(ctx, x)
    chunks = ch.chunks
    resident = ch.L * itemsize(x.dtype) <= ctx.chip.sbuf_usable_bytes_per_partition // 2
    outs = [o for o in op.outputs[1:] if o.numel > 0]
    saved = outs[:2] if training else []
    new_stats = outs[2:4]
    if training and rmean is not None and not new_stats:   # updated in place
        new_stats = [rmean, rvar]
    fmax = ctx.chip.bn_stats_free_elems_max
    nstats = sum(ceil(kn * hn / fmax) for _, kn, _, hn in chunks)
    for blk, c0, pc in ch.blocks():
        tiles = []
        if training:
            mv = ctx.tmp("mv", (pc, 2), "float32", blk)
            st = ctx.tmp("st", (pc, 6 * nstats), "float32", blk)
            i = 0
            for k in range(len(chunks)):
                t = ch.load(x, c0, pc, k, "x", k if resident else blk * len(chunks) + k,
                            bufs=len(chunks) if resident else BUFS)
                tiles.append(t)
                n = t.shape[1]
                for f0 in range(0, n, fmax):
                    b.bn_stats(st[0:pc, 6 * i:6 * i + 6], ctx.cols(t, pc, f0, min(fmax, n - f0)))
                    i += 1
            b.bn_aggr(mv, st)
            mean, var = mv[0:pc, 0:1], mv[0:pc, 1:2]
        else:
            mean, var = ch.column(rmean, c0, pc, "rmean"), ch.column(rvar, c0, pc, "rvar")
        # sc = (var + eps) ^ -0.5 [* w], nb = b - mean * sc: [C, 1] steps on VectorE
        sc = ctx.tmp("sc", (pc, 2), "float32", blk)
        rstd, scale, nb = sc[0:pc, 0:1], sc[0:pc, 1:2], ctx.tmp("nb", (pc, 1), "float32", blk)
        b.tensor_scalar(rstd, var, "add", eps, "power", -0.5)
        if weight is not None:
            b.tensor_tensor(scale, rstd, ch.column(weight, c0, pc, "w"), "multiply")
        else:
            scale = rstd
        stt(ctx, nb, mean, "multiply", -1.0, "multiply", scale)
        if bias is not None:
            b.tensor_tensor(nb, nb, ch.column(bias, c0, pc, "b"), "add")
        for k, chunk in enumerate(chunks):
            slot = blk * len(chunks) + k
            src = tiles[k] if tiles and resident else ch.load(x, c0, pc, k, "x", slot)
            y = ctx.tile("y", src.shape, out.dtype, slot)
            b.activation(y, src, "copy", bias=nb, scale=scale)
            b.dma_copy(ch.ap(out, c0, pc, chunk), y)
        for i, (t, v) in enumerate(zip(saved, (mean, rstd))):
            ch.store_column(t, v, c0, pc, f"saved{i}")
        if training and new_stats:
            n = max(ch.L, 2)
            for i, (t, src, v, f) in enumerate(zip(new_stats, (rmean, rvar), (mean, var),
                                                   (1.0, n / (n - 1)))):
                upd = ctx.tmp(f"upd{i}", (pc, 1), "float32", blk)
                b.tensor_scalar(upd, ch.column(src, c0, pc, f"run{i}"), "multiply", 1.0 - momentum)
                stt(ctx, upd, v, "multiply", momentum * f, "add", upd)
                ch.store_column(t, upd, c0, pc, f"updc{i}")
    ctx.end_op()


@lowers("aten::native_batch_norm_backward", "aten::batch_norm_backward")
def batch_norm_backward(ctx, op):
    """(grad, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
    output_mask): per channel, with the saved mean and invstd (evaluating: the running mean and
    (running_var + eps) ^ -0.5), xhat = x * invstd - mean * invstd:
        grad_bias = s1 = sum(g), grad_weight = s2 = sum(g * xhat),
        grad_input = w * invstd * (g - s1 / L - xhat * s2 / L)    (evaluating: w * invstd * g)
    The statistics pass, per chunk: s1 free on ScalarE (its copy discarded), xhat on ScalarE,
    g * xhat and its sum on VectorE; then grad_input = g * k + (x * a + c) per chunk (a, c, k
    per channel from [C, 1] steps): one ScalarE activation and one VectorE pass. g and x stay
    loaded between the passes when a channel's elements fit half of SBUF, else are read again."""
    g, x = op.inputs[0], op.inputs[1]
    weight, rmean, rvar, smean, sinv = (op.arg(i) if isinstance(op.arg(i), TensorSpec) else None
                                        for i in range(2, 7))
    train = bool(op.arg(7)) and smean is not None
    eps = op.arg(8) if isinstance(op.arg(8), (int, float)) else 1e-5
    named = _grad_outputs(op, ("in", "w", "b"), 9)
    gi = named["in"]
    b = ctx.b
    ch = _Channels(ctx, x)
    K = len(ch.chunks)
    resident = ch.L * (itemsize(g.dtype) + itemsize(x.dtype)) <= \
        ctx.chip.sbuf_usable_bytes_per_partition // 2
    sums = named["w"] is not None or named["b"] is not None or (train and gi is not None)
    for blk, c0, pc in ch.blocks():
        if train:
            mean, inv = ch.column(smean, c0, pc, "mean"), ch.column(sinv, c0, pc, "inv")
        else:
            mean, inv = ch.column(rmean, c0, pc, "mean"), ctx.tmp("inv", (pc, 1), "float32", blk)
            b.tensor_scalar(inv, ch.column(rvar, c0, pc, "rvar"), "add", eps, "power", -0.5)
        # per channel: nb = -mean * invstd | k = w * invstd | s1 | s2 | m2 | a | c
        cf = ctx.tmp("coef", (pc, 7), "float32", blk)
        nb, k, s1, s2, m2, a, c = (cf[0:pc, i:i + 1] for i in range(7))
        stt(ctx, nb, mean, "multiply", -1.0, "multiply", inv)
        if weight is not None:
            b.tensor_tensor(k, inv, ch.column(weight, c0, pc, "w"), "multiply")
        else:
            k = inv
        loaded = {}
        if sums:
            parts = ctx.tmp("parts", (pc, 2 * K), "float32", blk)    # s1 | s2 of each chunk
            for j in range(K):
                slot = j if resident else blk * K + j
                bufs = K if resident else BUFS
                gt = loaded["g", j] = ch.load(g, c0, pc, j, "g", slot, bufs)
                xt = loaded["x", j] = ch.load(x, c0, pc, j, "x", slot, bufs)
                xhat = ctx.tmp("xhat", gt.shape, "float32", j)
                b.activation(xhat, gt, "copy", reduce_res=parts[0:pc, j:j + 1])
                b.activation(xhat, xt, "copy", bias=nb, scale=inv)
                gx = ctx.tmp("gx", gt.shape, "float32", j)
                b.tensor_tensor(gx, gt, xhat, "multiply")
                b.tensor_reduce(parts[0:pc, K + j:K + j + 1], gx, "add")
            b.tensor_reduce(cf[0:pc, 2:4], parts, "add")
            for name, v in (("b", s1), ("w", s2)):
                if named[name] is not None:
                    ch.store_column(named[name], v, c0, pc, f"grad{name}")
        if gi is None:
            continue
        if train:   # m2 = -k * s2 / L, a = m2 * invstd, c = -k * s1 / L + nb * m2
            inv_l = -1.0 / max(ch.L, 1)
            stt(ctx, m2, s2, "multiply", inv_l, "multiply", k)
            b.tensor_tensor(a, m2, inv, "multiply")
            stt(ctx, c, s1, "multiply", inv_l, "multiply", k)
            stt(ctx, c, nb, "multiply", m2, "add", c)
        for j, chunk in enumerate(ch.chunks):
            slot = blk * K + j
            gt = loaded.get(("g", j)) if resident else None
            gt = gt if gt is not None else ch.load(g, c0, pc, j, "g", slot)
            y = ctx.tile("y", gt.shape, gi.dtype, slot)
            if train:
                xt = loaded.get(("x", j)) if resident else None
                xt = xt if xt is not None else ch.load(x, c0, pc, j, "x", slot)
                t = ctx.tmp("t", gt.shape, "float32", j)
                b.activation(t, xt, "copy", bias=c, scale=a)
                stt(ctx, y, gt, "multiply", k, "add", t)
            else:
                b.activation(y, gt, "copy", scale=k)
            b.dma_copy(ch.ap(gi, c0, pc, chunk), y)
    ctx.end_op()
