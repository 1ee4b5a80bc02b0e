"""Low-precision linear layers for estimates: FP8 (Trn2, Trn3) and MX (Trn3) matmuls through
`torch._scaled_mm`, with the input quantised on every call (amax -> scale -> cast), so the
quantisation is timed with the matmul.

- FP8: e4m3 weights and activations, a scale per row of the activations and per output channel
  of the weight (amax / 448, e4m3's largest value), FP32 accumulation, BF16 output.
- MX (OCP microscaling, MXFP8): e4m3 elements with one power-of-two (E8M0) scale per block of
  32 along K [ArchV4: mx_group_size in trainium-hw.json]; needs a chip with MX matmul.

For inference the weight is quantised once, when the layer is swapped (FP8 weights are served
from HBM: half the bytes of BF16) and only the activations per call; for training the BF16
weight is quantised on every call and the backward's two GEMMs run in the same precision. The
layouts are the ones `torch._scaled_mm` requires (activations row-major, weight column-major,
i.e. K contiguous in both): Trainium's DMA transposes only 2-byte types, so the lowering moves
both FP8 operands K-major through TensorE transposes, and that cost is part of the time.
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0          # largest finite e4m3fn value (OCP FP8 spec)
MX_BLOCK = 32             # elements along K per E8M0 scale (OCP MX)
PRECISIONS = ("bf16", "fp8", "mx")


def check_precision(precision: str, chip) -> str:
    """`precision` normalised; raises ValueError naming the chip when it lacks the matmul."""
    p = str(precision).lower()
    if p not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}.")
    if p == "mx" and not chip.has_mx_matmul:
        raise ValueError(f"precision 'mx' needs MX matmul (NeuronCore-v4, Trn3), which "
                         f"{chip.name} does not have; use 'fp8' or 'bf16' on {chip.name}, "
                         "or a Trn3 instance.")
    if p == "fp8" and not chip.has_fp8_double_row:
        raise ValueError(f"precision 'fp8' needs FP8 matmul at double rate (NeuronCore-v3+), "
                         f"which {chip.name} does not have; use 'bf16'.")
    return p


def _rowwise(x: torch.Tensor):
    """e4m3 values of the rows of x and their FP32 scales [rows, 1]."""
    scale = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-12) / E4M3_MAX
    return (x.float() / scale).to(E4M3), scale


def _blockwise(x: torch.Tensor):
    """MXFP8: e4m3 values of x and one E8M0 scale per MX_BLOCK elements along the last dim."""
    rows, k = x.shape
    xb = x.float().view(rows, k // MX_BLOCK, MX_BLOCK)
    amax = xb.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -126)
    scale = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))
    q = (xb / scale).to(E4M3).view(rows, k)
    # _scaled_mm takes block scales padded to 128 rows x 4 blocks (cuBLAS's tiled layout)
    scale = torch.nn.functional.pad(scale.view(rows, k // MX_BLOCK),
                                    (0, -(k // MX_BLOCK) % 4, 0, -rows % 128), value=1.0)
    return q, scale.to(torch.float8_e8m0fnu)


def _quantize(x: torch.Tensor, precision: str):
    """x [rows, K] quantised along K (the contraction), with its scales as _scaled_mm takes
    them for its first operand."""
    return _rowwise(x) if precision == "fp8" else _blockwise(x)


def _scaled(a, b, precision, out_dtype):
    """a [M, K] @ b [N, K].T in `precision`: both quantised along K on the way in."""
    aq, sa = _quantize(a, precision)
    bq, sb = _quantize(b, precision)
    return torch._scaled_mm(aq, bq.t(), scale_a=sa, scale_b=sb.t() if precision == "fp8" else sb,
                            out_dtype=out_dtype)


class _ScaledMatmul(torch.autograd.Function):
    """y = x @ w.T with all three GEMMs of training in `precision` (as torchao's float8
    training does): grad_x = g @ w and grad_w = g.T @ x quantise transposed copies, because
    each operand must be quantised along its contraction dimension."""

    @staticmethod
    def forward(ctx, x, w, precision):
        ctx.save_for_backward(x, w)
        ctx.precision = precision
        return _scaled(x, w, precision, x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        p = ctx.precision
        gx = _scaled(g, w.t().contiguous(), p, g.dtype)
        gw = _scaled(g.t().contiguous(), x.t().contiguous(), p, w.dtype)
        return gx, gw, None


class ScaledLinear(torch.nn.Module):
    """nn.Linear's forward (no bias) in FP8 or MX through torch._scaled_mm. For inference
    (`trainable=False`) the weight is quantised once, here; for training it stays a BF16
    parameter and is quantised on every call, forward and backward."""

    def __init__(self, linear: torch.nn.Linear, precision: str, trainable: bool = False):
        super().__init__()
        if linear.bias is not None:
            raise ValueError("ScaledLinear: a linear with a bias is not supported (the Llama "
                             "and Mixtral layouts have none).")
        self.precision, self.trainable = precision, trainable
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.out_dtype = linear.weight.dtype
        if trainable:
            self.weight = linear.weight
            return
        with torch.no_grad():
            q, s = _quantize(linear.weight.detach(), precision)
        self.register_buffer("weight_q", q)           # [out, in]: its .t() is column-major
        self.register_buffer("weight_scale", s.t() if precision == "fp8" else s)

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.trainable:
            y = _ScaledMatmul.apply(x2, self.weight, self.precision)
        else:
            xq, xs = _quantize(x2, self.precision)
            y = torch._scaled_mm(xq, self.weight_q.t(), scale_a=xs, scale_b=self.weight_scale,
                                 out_dtype=self.out_dtype)
        return y.view(*shape[:-1], self.out_features)


def quantize_linears(module: torch.nn.Module, precision: str, trainable: bool = False) -> int:
    """Replace every nn.Linear under `module` by a ScaledLinear (in place); returns how many.
    precision 'bf16' leaves the module as it is."""
    if precision == "bf16":
        return 0
    n = 0
    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(module, name, ScaledLinear(child, precision, trainable))
            n += 1
        else:
            n += quantize_linears(child, precision, trainable)
    return n
