"""roofline_ns: the time a kernel cannot beat on one NeuronCore, max(compute, memory), for
callers that have no ISA program yet (the device backend before lowering exists)."""

from __future__ import annotations

from .hardware import get_chip


def roofline_ns(flops: float, nbytes: float, dtype: str = "bfloat16", chip=None, *,
                lnc: int = 1) -> float:
    """max(flops / TensorE peak for `dtype`, bytes / HBM share) in ns, for one logical core of
    `lnc` physical cores."""
    c = get_chip(chip)
    compute = flops / (c.tensor_peak_flops(str(dtype)) * lnc)
    memory = nbytes / (c.hbm_bytes_per_s_per_core * lnc)
    return max(compute, memory) * 1e9
