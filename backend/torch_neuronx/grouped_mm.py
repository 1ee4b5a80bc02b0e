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


def _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    out_dtype = out_dtype or self.dtype
    if self.dim() == 3 and mat2.dim() == 3:                  # (G, M, K) x (G, K, N)
        out = torch.bmm(self, mat2).to(out_dtype)
    elif self.dim() == 2 and mat2.dim() == 3:                # rows of self grouped by offs
        out = self.new_zeros(self.shape[0], mat2.shape[2], dtype=out_dtype)
        for g, start, end in _groups(offs, self.shape[0]):
            out[start:end] = self[start:end] @ mat2[g]
    elif self.dim() == 2 and mat2.dim() == 2:                # K grouped by offs: (G, M, N)
        out = self.new_zeros(offs.shape[0], self.shape[0], mat2.shape[1], dtype=out_dtype)
        for g, start, end in _groups(offs, self.shape[1]):
            out[g] = self[:, start:end] @ mat2[start:end]
    elif self.dim() == 3 and mat2.dim() == 2:                # columns of mat2 grouped by offs
        out = self.new_zeros(self.shape[1], mat2.shape[1], dtype=out_dtype)
        for g, start, end in _groups(offs, mat2.shape[1]):
            out[:, start:end] = self[g] @ mat2[:, start:end]
    else:
        raise RuntimeError(f"_grouped_mm: inputs must be 2-D or 3-D, got {self.dim()}-D and "
                           f"{mat2.dim()}-D.")
    return out if bias is None else out + bias


_LIB.impl("_grouped_mm", _grouped_mm, "PrivateUse1")
