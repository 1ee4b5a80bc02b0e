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

import torch

from . import _C
from .time_only import is_time_only, moe_routing

_LIB = torch.library.Library("aten", "IMPL")


def _group_ends(offs, extent: int) -> list[int]:
    if not is_time_only():
        return _C._host_alias(offs).tolist()
    groups = offs.shape[0]
    shares = moe_routing(groups)
    ends, total = [], 0.0
    for share in shares:
        total += share
        ends.append(round(total * extent))
    return ends


def _groups(offs, extent: int):
    """(group, start, end) of every group along a dimension of `extent`."""
    start = 0
    for g, end in enumerate(_group_ends(offs, extent)):
        yield g, start, end
        start = end


def _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    out_dtype = out_dtype or self.dtype
    if self.dim() == 3 and mat2.dim() == 3:                  # (G, M, K) x (G, K, N)
        out = torch.bmm(self, mat2).to(out_dtype)
    elif self.dim() == 2 and mat2.dim() == 3:                # rows of self grouped by offs
        out = self.new_zeros(self.shape[0], mat2.shape[2], dtype=out_dtype)
        for g, start, end in _groups(offs, self.shape[0]):
            if end > start:
                out[start:end] = self[start:end] @ mat2[g]
    elif self.dim() == 2 and mat2.dim() == 2:                # K grouped by offs: (G, M, N)
        out = self.new_zeros(offs.shape[0], self.shape[0], mat2.shape[1], dtype=out_dtype)
        for g, start, end in _groups(offs, self.shape[1]):
            if end > start:
                out[g] = self[:, start:end] @ mat2[start:end]
    elif self.dim() == 3 and mat2.dim() == 2:                # columns of mat2 grouped by offs
        out = self.new_zeros(self.shape[1], mat2.shape[1], dtype=out_dtype)
        for g, start, end in _groups(offs, mat2.shape[1]):
            if end > start:
                out[:, start:end] = self[g] @ mat2[:, start:end]
    else:
        raise RuntimeError(f"_grouped_mm: inputs must be 2-D or 3-D, got {self.dim()}-D and "
                           f"{mat2.dim()}-D.")
    return out if bias is None else out + bias


_LIB.impl("_grouped_mm", _grouped_mm, "PrivateUse1")
