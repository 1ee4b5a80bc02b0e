"""Scans, sorting and windowed ops: cumsum/cumprod, sort/topk/argsort, pooling and upsampling
(forward and backward).

- Scans along the last dim: `tensor_tensor_scan` on VectorE, max(64, 2N) cycles (two input
  streams) [ISAcost], rows on partitions.
- sort/topk: GpSimd `topk` costs 4n + K cycles per partition (NC-v3+) [ISAcost]; the builder has
  no topk instruction yet, so it is charged as four GpSimd element-wise passes (150 + N each,
  the gpsimd_elementwise_cycles assumption), which is the same 4N.
- Pooling with a k x k window: k*k VectorE max/add passes over the output (tensor_tensor on
  shifted access patterns of the input tile); its backward scatters the gradient back with the
  same number of passes. Upsampling is one VectorE copy per output element (broadcast reads)."""

from __future__ import annotations

from math import prod

from ..registry import lowers
from ..spec import TensorSpec


@lowers("aten::cumsum", "aten::cumprod", "aten::logcumsumexp", "aten::cummax", "aten::cummin")
def scan(ctx, op):
    x, out = op.inputs[0], op.outputs[0]
    ctx.stream(out, [x], lambda s, d, p, f, j: ctx.b.tensor_tensor_scan(
        d[0], s[0], s[0], 0.0, "multiply", "add"))


@lowers("aten::sort", "aten::topk", "aten::argsort", "aten::kthvalue", "aten::median",
        "aten::msort", "aten::unique", "aten::_unique2", "aten::mode")
def sort(ctx, op):
    x = op.inputs[0]
    out = TensorSpec(x.shape, x.dtype, None, ("sorted", x.id))
    outs = [o for o in op.outputs if o.numel > 0] or [out]

    def body(s, d, p, f, j):
        cur = s[0]
        for k in range(4):
            tmp = d[0] if k == 3 else ctx.tmp(f"sort{k}", (p, f), "float32", j)
            ctx.b.tensor_tensor(tmp, cur, cur, "maximum", engine="gpsimd")
            cur = tmp
        for extra in d[1:]:
            ctx.b.tensor_copy(extra, cur)
    ctx.stream(outs[0] if outs[0].numel == x.numel else out, [x], body,
               outs=[o if o.numel == x.numel else out for o in outs][:2])


def _window(op):
    ks = op.arg(1)
    if isinstance(ks, int):
        return ks * ks
    if isinstance(ks, tuple) and ks:
        return max(1, prod(ks))
    return 4


@lowers("aten::max_pool2d_with_indices", "aten::max_pool2d", "aten::avg_pool2d",
        "aten::max_pool1d", "aten::avg_pool1d", "aten::max_pool3d_with_indices",
        "aten::avg_pool3d", "aten::_adaptive_avg_pool2d", "aten::adaptive_avg_pool2d",
        "aten::adaptive_max_pool2d", "aten::_adaptive_avg_pool3d")
def pool(ctx, op):
    x, out = op.inputs[0], op.outputs[0]
    ratio = x.numel // max(out.numel, 1)          # input elements per output element
    k = max(1, ratio if "adaptive" in op.op else min(_window(op), ratio))
    alu = "add" if "avg" in op.op else "maximum"
    idx = [o for o in op.outputs[1:] if o.numel == out.numel]
    b = ctx.b
    p, cols, f, chunks = ctx.chunked(x, streams=2)
    for j, fj in chunks:
        src = ctx.load(x, p, cols, j, fj, off=j * f)
        fo = max(1, fj // k)
        dst = ctx.tile("pool", (p, fo), out.dtype, j)
        for i in range(min(k, 64)):    # one pass per window element over output-sized slices
            win = ctx.cols(src, p, i * fo if (i + 1) * fo <= fj else 0, fo)
            b.tensor_tensor(dst, win, dst if i else ctx.cols(src, p, 0, fo), alu)
        ctx.store(out, dst, p, j, fo, off=j * max(1, f // k))
        for o in idx:                  # indices of the max
            it = ctx.tile("poolidx", (p, fo), o.dtype, j)
            b.tensor_copy(it, dst)
            ctx.store(o, it, p, j, fo, off=j * max(1, f // k))
    ctx.end_op()


@lowers("aten::max_pool2d_with_indices_backward", "aten::avg_pool2d_backward",
        "aten::_adaptive_avg_pool2d_backward", "aten::adaptive_max_pool2d_backward",
        "aten::max_pool3d_with_indices_backward", "aten::avg_pool3d_backward",
        "aten::upsample_nearest2d", "aten::upsample_bilinear2d", "aten::upsample_nearest1d",
        "aten::upsample_nearest2d_backward", "aten::upsample_bilinear2d_backward",
        "aten::_upsample_nearest_exact2d", "aten::_upsample_bilinear2d_aa",
        "aten::grid_sampler_2d", "aten::_unsafe_index")
def spread(ctx, op):
    """Outputs computed from a neighbourhood of inputs: one load of each input, one VectorE
    pass per output element (bilinear: 4 taps), one store."""
    out = op.outputs[0]
    taps = 4 if "bilinear" in op.op or "grid" in op.op else 1
    ins = [TensorSpec(out.shape, t.dtype, None, t.id) if t.numel < out.numel else t
           for t in op.inputs[:1]]

    def body(s, d, p, f, j):
        for i in range(taps):
            ctx.b.tensor_tensor(d[0], s[0], d[0] if i else s[0], "add")
    ctx.stream(out, ins, body)
