"""Neuron kernels for ATen ops whose only kernels are CUDA's: without them the CPU fallback
finds no CPU kernel ("Could not run ... with arguments from the 'CPU' backend").

Found from PyTorch's native function registrations (ops with a CUDA dispatch entry and no CPU
or composite one) and kept to those a model on 'neuron' reaches: PyTorch's device-generic code
takes the CUDA path for PrivateUse1 too (fused RNN cells, fused dropout, SyncBatchNorm's
statistics, record_stream, out_dtype matmuls, FP8 grouped GEMM). Each kernel is composed of
ATen ops on the device, so results are CPU-exact and the simulator times every piece.
The ops left out and why are listed in tests/contract/test_cuda_only_ops.py.
"""

from __future__ import annotations

import torch

from .fp8_linear import MX_BLOCK
from .grouped_mm import grouped_matmul

_LIB = torch.library.Library("aten", "IMPL")


def _impl(name):
    def register(fn):
        _LIB.impl(name, fn, "PrivateUse1")
        return fn
    return register


# ---- fused RNN cells (nn.LSTM / nn.GRU take them on every accelerator) ---------------------
# The workspace layouts are ours; only our backward kernels read them.

@_impl("_thnn_fused_lstm_cell")
def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


@_impl("_thnn_fused_lstm_cell_backward_impl")
def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy) if grad_cy is None else grad_cy
    grad_o = torch.zeros_like(o)
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy * o * (1 - o)
    grad_gates = torch.cat([grad_c * g * i * (1 - i), grad_c * cx * f * (1 - f),
                            grad_c * i * (1 - g * g), grad_o], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


@_impl("_thnn_fused_gru_cell")
def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


@_impl("_thnn_fused_gru_cell_backward")
def _gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * r * (1 - r)
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    if has_bias:
        return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)
    return grad_input, grad_hidden, grad_hy * z, None, None


# ---- dropout's fused form, record_stream ------------------------------------------------------

@_impl("_fused_dropout")
def _fused_dropout(self, p, generator=None):
    # p is the probability to keep, as in CUDA's kernel.
    mask = torch.empty_like(self, dtype=torch.uint8).bernoulli_(p, generator=generator)
    return self * mask * (1.0 / p if p > 0 else 0.0), mask


@_impl("_masked_scale")
def _masked_scale(self, mask, scale):
    return self * mask * scale


@_impl("record_stream")
def _record_stream(self, stream):
    """Nothing to do: the allocator never hands a freed block to another stream early."""


# ---- matmuls with an out_dtype (fp32 results of 16-bit inputs, as CUDA allows) --------------

def _out_dtype(op, n):
    """The `.dtype` kernel of matmul `op` whose first `n` arguments are tensors: cast them to
    out_dtype (checked against the first matrix operand) and multiply."""
    def kernel(*args, **kwargs):
        tensors, out_dtype = args[:n], args[n]
        a = tensors[-2]
        if out_dtype != a.dtype and not (out_dtype == torch.float32
                                         and a.dtype in (torch.float16, torch.bfloat16)):
            raise RuntimeError(f"{op}: out_dtype must be the input dtype ({a.dtype}) or float32 "
                               f"for float16/bfloat16 inputs, got {out_dtype}.")
        return getattr(torch, op)(*(t.to(out_dtype) for t in tensors), **kwargs)
    return kernel


def _dtype_out(fn):
    def kernel(*args, out, **kwargs):
        result = fn(*args, **kwargs)
        out.resize_(result.shape).copy_(result)
        return out
    return kernel


for _op, _n in (("mm", 2), ("bmm", 2), ("addmm", 3), ("baddbmm", 3)):
    _LIB.impl(f"{_op}.dtype", _out_dtype(_op, _n), "PrivateUse1")
    _LIB.impl(f"{_op}.dtype_out", _dtype_out(_out_dtype(_op, _n)), "PrivateUse1")


# ---- SyncBatchNorm's statistics (torch.nn.SyncBatchNorm on an accelerator) -------------------

def _channels(x):
    return [d for d in range(x.dim()) if d != 1]


def _per_channel(t, x):
    return t.view([1, -1] + [1] * (x.dim() - 2))


@_impl("batch_norm_stats")
def _bn_stats(input, eps):
    x = input.float()
    var, mean = torch.var_mean(x, _channels(x), correction=0)
    return mean, (var + eps).rsqrt()


@_impl("batch_norm_elemt")
def _bn_elemt(input, weight, bias, mean, invstd, eps):
    out = (input - _per_channel(mean, input)) * _per_channel(invstd, input)
    if weight is not None:
        out = out * _per_channel(weight, input)
    if bias is not None:
        out = out + _per_channel(bias, input)
    return out.to(input.dtype)


@_impl("batch_norm_elemt.out")
def _bn_elemt_out(input, weight, bias, mean, invstd, eps, *, out):
    return out.copy_(_bn_elemt(input, weight, bias, mean, invstd, eps))


@_impl("batch_norm_gather_stats_with_counts")
def _bn_gather(input, mean, invstd, running_mean, running_var, momentum, eps, counts):
    counts = counts.to(mean.dtype).view(-1, 1)
    total = counts.sum()
    mean_all = (mean * counts).sum(0) / total
    var_i = invstd.pow(-2) - eps
    var = (counts * (var_i + (mean - mean_all).square())).sum(0) / total
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean_all.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = var * total / (total - 1)
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return mean_all, (var + eps).rsqrt()


@_impl("batch_norm_gather_stats")
def _bn_gather_count(input, mean, invstd, running_mean, running_var, momentum, eps, count):
    counts = torch.full((mean.shape[0],), count, dtype=mean.dtype, device=mean.device)
    return _bn_gather(input, mean, invstd, running_mean, running_var, momentum, eps, counts)


@_impl("batch_norm_backward_reduce")
def _bn_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    dims = _channels(input)
    g = grad_out.float()
    sum_dy = g.sum(dims)
    sum_dy_xmu = (g * (input.float() - _per_channel(mean, input))).sum(dims)
    has_weight = weight is not None
    grad_weight = (sum_dy_xmu * invstd).to(weight.dtype) if weight_g and has_weight else None
    grad_bias = sum_dy.to(weight.dtype) if bias_g and has_weight else None
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


@_impl("batch_norm_backward_elemt")
def _bn_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    total = count.sum().to(torch.float32)
    mean_dy, mean_dy_xmu = sum_dy / total, sum_dy_xmu / total
    scale = invstd if weight is None else invstd * weight.float()
    xmu = input.float() - _per_channel(mean, input)
    grad = (grad_out.float() - _per_channel(mean_dy, input)
            - xmu * _per_channel(invstd * invstd * mean_dy_xmu, input)) * _per_channel(scale, input)
    return grad.to(input.dtype)


# ---- FP8 grouped GEMM (MoE) -----------------------------------------------------------------

@_impl("_scaled_grouped_mm")
def _scaled_grouped_mm(self, mat2, scale_a, scale_b, offs=None, bias=None, scale_result=None,
                       out_dtype=None, use_fast_accum=False):
    """Row-wise scaled grouped GEMM: out[m, n] = scale_a[m] * scale_b[n] * (a @ b)[m, n] per
    group, accumulated in fp32 (CUDA's numerics for e4m3 inputs), in out_dtype (bf16)."""
    a, b = self.float(), mat2.float()
    sa, sb = scale_a.float().reshape(-1), scale_b.float().reshape(-1)

    def scale(product, rows, cols):      # (rows, cols None: the bmm's (G, M, N))
        if rows is None:
            return product * sa.view(a.shape[0], -1, 1) * sb.view(a.shape[0], 1, -1)
        return product * sa[rows, None] * sb[None, cols]

    out = grouped_matmul("_scaled_grouped_mm", a, b, offs, torch.float32, scale)
    if bias is not None:
        out = out + bias.float()
    if scale_result is not None:
        out = out * scale_result.float()
    return out.to(out_dtype or torch.bfloat16)


# torch.nn.functional.ScalingType / SwizzleType values (as of torch 2.13).
_ROW_WISE, _BLOCK_WISE_1X32 = 1, 3


def _mx_dequantize(x, scale, k_dim, op):
    """fp32 x times its e8m0 scale, one scale per 32 consecutive elements along k_dim; the scale
    tensor is laid out with K last (x's own layout for A, B transposed's for B)."""
    k = x.shape[k_dim]
    want = tuple(s for d, s in enumerate(x.shape) if d != k_dim % x.dim()) + (-(-k // MX_BLOCK),)
    if tuple(scale.shape) != want:
        raise RuntimeError(f"{op}: BlockWise1x32 scale of shape {tuple(scale.shape)} for an "
                           f"operand of shape {tuple(x.shape)} (K={k} along dim {k_dim}); "
                           f"expected {want}: one scale per {MX_BLOCK} K elements, K last, "
                           f"not swizzled.")
    full = scale.float().repeat_interleave(MX_BLOCK, -1)[..., :k]
    return x.float() * full.movedim(-1, k_dim)


@_impl("_scaled_grouped_mm_v2")
def _scaled_grouped_mm_v2(self, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b,
                          offs=None, bias=None, out_dtype=None, contraction_dim=(),
                          use_fast_accum=False):
    """torch.nn.functional.scaled_grouped_mm. Row-wise FP8 is _scaled_grouped_mm's kernel; MXFP8
    (BlockWise1x32, e8m0 scales) is dequantised per block to fp32 and multiplied group by group
    with _grouped_mm, so the products are exact and only the fp32 accumulation order may
    differ from CUDA's block-scaled MMA."""
    op = "_scaled_grouped_mm_v2"
    recipes = (list(recipe_a), list(recipe_b))
    if len(scale_a) != 1 or len(scale_b) != 1:
        raise RuntimeError(f"{op}: one scale tensor per operand is supported, got "
                           f"{len(scale_a)} and {len(scale_b)} (two-level NVFP4 scaling is "
                           f"not); use RowWise or BlockWise1x32 scales.")
    if any(swizzle_a) or any(swizzle_b):
        raise RuntimeError(f"{op}: swizzled scales (swizzle {list(swizzle_a)}, "
                           f"{list(swizzle_b)}) are CUDA's tensor-core tiling; pass "
                           f"SwizzleType.NO_SWIZZLE scales in row-major order.")
    if list(contraction_dim) not in ([], [self.dim() - 1, mat2.dim() - 2]):
        raise RuntimeError(f"{op}: contraction_dim {list(contraction_dim)} is not supported; "
                           f"K must be the last dim of A and the second-to-last of B "
                           f"([{self.dim() - 1}, {mat2.dim() - 2}] or []).")
    out_dtype = out_dtype or torch.bfloat16
    if recipes == ([_ROW_WISE], [_ROW_WISE]):
        return _scaled_grouped_mm(self, mat2, scale_a[0], scale_b[0], offs=offs, bias=bias,
                                  out_dtype=out_dtype, use_fast_accum=use_fast_accum)
    if recipes == ([_BLOCK_WISE_1X32], [_BLOCK_WISE_1X32]):
        a = _mx_dequantize(self, scale_a[0], -1, op)
        b = _mx_dequantize(mat2, scale_b[0], -2, op)
        out = torch._grouped_mm(a, b, offs=offs, out_dtype=torch.float32)
        if bias is not None:
            out = out + bias.float()
        return out.to(out_dtype)
    raise RuntimeError(f"{op}: scaling recipes {recipes[0]} x {recipes[1]} are not supported "
                       f"on neuron; use RowWise x RowWise ({_ROW_WISE}) or BlockWise1x32 x "
                       f"BlockWise1x32 ({_BLOCK_WISE_1X32}, MXFP8).")
