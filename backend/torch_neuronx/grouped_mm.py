"""Grouped GEMM (`torch._grouped_mm`, the MoE experts' matmul of Hugging Face and TorchTitan)
on 'neuron': one matmul per group, on the device.

The group boundaries are `offs` (cumulative ends along the grouped dimension), which the kernel
reads on the device, as a grouped-GEMM kernel does: no copy to the host, no sync. In
time-only mode they have no values, so the groups follow the declared routing assumption
(`torch_neuronx.set_moe_routing`): uniform by default, or given fractions per expert. Results
equal PyTorch's CPU fallback on the rows the groups cover; rows past the last group are 0
(uninitialised on CPU).
"""

from __future__ import annotations

import itertools

import torch

from . import _C
from .time_only import is_time_only, moe_routing

_LIB = torch.library.Library("aten", "IMPL")


def _groups(offs, extent: int):
    """(group, start, end) of every non-empty group along a dimension of `extent`."""
    if is_time_only():      # offs has no values: the routing assumption sizes the groups
        shares = moe_routing(offs.shape[0])
        ends = [round(total * extent) for total in itertools.accumulate(shares)]
    else:
        ends = _C._host_alias(offs).tolist()
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            yield g, start, end
        start = end


def grouped_matmul(op, a, b, offs, out_dtype, scale=None):
    """One matmul per group in torch._grouped_mm's four layouts, in a new out_dtype tensor:
    (G, M, K) x (G, K, N) as one bmm; 2-D x 3-D: a's rows grouped by offs; 2-D x 2-D: K grouped,
    out (G, M, N); 3-D x 2-D: b's columns grouped. Output no group covers is 0.
    scale(product, rows, cols), if given, scales a group's product: rows and cols are the slices
    its rows and columns take among all groups' rows and columns (None, None: the bmm's)."""
    scaled = scale or (lambda product, rows, cols: product)
    if a.dim() == 3 and b.dim() == 3:
        return scaled(torch.bmm(a, b), None, None).to(out_dtype)
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise RuntimeError(f"{op}: inputs must be 2-D or 3-D, got {a.dim()}-D and {b.dim()}-D.")
    if offs is None:    # (torch's own check and message)
        raise RuntimeError(f"{op}: Have to provide offsets if there is a 2d matrix, or no offset "
                           f"if both matrices are 3d")
    M, N = a.shape[-2], b.shape[-1]

    def of_group(g, n):
        return slice(g * n, (g + 1) * n)

    if b.dim() == 3:                                        # rows of a grouped by offs
        out = a.new_zeros(M, N, dtype=out_dtype)
        for g, start, end in _groups(offs, M):
            out[start:end] = scaled(a[start:end] @ b[g], slice(start, end), of_group(g, N))
    elif a.dim() == 2:                                      # K grouped by offs: (G, M, N)
        out = a.new_zeros(offs.shape[0], M, N, dtype=out_dtype)
        for g, start, end in _groups(offs, a.shape[1]):
            out[g] = scaled(a[:, start:end] @ b[start:end], of_group(g, M), of_group(g, N))
    else:                                                   # columns of b grouped by offs
        out = a.new_zeros(M, N, dtype=out_dtype)
        for g, start, end in _groups(offs, N):
            out[:, start:end] = scaled(a[g] @ b[:, start:end], of_group(g, M), slice(start, end))
    return out


def _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    out = grouped_matmul("_grouped_mm", self, mat2, offs, out_dtype or self.dtype)
    return out if bias is None else out + bias


_LIB.impl("_grouped_mm", _grouped_mm, "PrivateUse1")
