"""roofline_ns: the time a kernel cannot beat on one NeuronCore, max(compute, memory), for
callers that have no ISA program yet (the device backend before lowering exists); model_flops:
the matmul FLOPs an op does by definition (the roofline estimate's compute, MFU's numerator)."""

from __future__ import annotations

import math

from .hardware import get_chip


def roofline_ns(flops: float, nbytes: float, dtype: str = "bfloat16", chip=None, *,
                lnc: int = 1) -> float:
    """max(flops / TensorE peak for `dtype`, bytes / HBM share) in ns, for one logical core of
    `lnc` physical cores."""
    c = get_chip(chip)
    compute = flops / (c.tensor_peak_flops(str(dtype)) * lnc)
    memory = nbytes / (c.hbm_bytes_per_s_per_core * lnc)
    return max(compute, memory) * 1e9


_MATMUL = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "addbmm", "dot", "mv", "addmv",
           "_scaled_mm", "_grouped_mm"}
_CONV = {"convolution", "_convolution", "convolution_backward"}


def model_flops(base: str, ins: list, outs: list) -> float:
    """The matmul FLOPs of one op (`base`: its name without namespace and overload; `ins`, `outs`:
    the shapes of its tensors, in argument order) as the model defines them (2 per multiply-add;
    no padding, transposes or recomputation): what MFU counts."""
    if base in _MATMUL:
        if not outs:
            return 0.0
        first = 1 if base in ("addmm", "baddbmm", "addbmm", "addmv") else 0   # addmm(input, a, b)
        a = ins[first] if len(ins) > first else None
        k = a[-1] if a else 1
        return 2.0 * math.prod(outs[0]) * k
    if base == "convolution_backward":
        if len(ins) < 3:
            return 0.0
        grad_out, weight = ins[0], ins[2]
        per_out = math.prod(weight) / max(weight[0], 1)
        return 2 * 2.0 * math.prod(grad_out) * per_out     # grad_input + grad_weight
    if base in _CONV:
        if len(ins) < 2 or not outs:
            return 0.0
        weight = ins[1]
        return 2.0 * math.prod(outs[0]) * math.prod(weight) / max(weight[0], 1)
    if (base.startswith("_scaled_dot_product") or base == "scaled_dot_product_attention") \
            and len(ins) > 1:
        q, k = ins[0], ins[1]
        b_h = math.prod(q[:-2]) if len(q) > 2 else 1
        passes = 2 if "backward" in base else 1
        return passes * 4.0 * b_h * q[-2] * k[-2] * q[-1]
    return 0.0
