"""The documented fallback for an op with no lowering rule (or one its rule rejects).

time = max(FLOPs / TensorE peak for the dtype, bytes / HBM share) for the logical core
       + 2 x the DMA fixed latency (one load and one store wave that cannot overlap anything)
FLOPs are the op's model FLOPs (roofline.model_flops: matmuls, convolutions, attention), bytes
are every device tensor argument plus outputs. The result is flagged `estimated=True` and listed
by the backend's `torch_neuronx.estimated_ops()`, so users see which numbers are modelled, not
simulated."""

from __future__ import annotations

from ..hardware import get_chip
from ..numerics.formats import itemsize
from ..roofline import model_flops, roofline_ns
from .spec import OpSpec


def _itemsize(dtype) -> float:
    try:
        return itemsize(dtype)
    except ValueError:        # a dtype the device has no native format for (complex, ...)
        return 4.0


def estimate(op: OpSpec, chip, lnc: int = 1):
    c = get_chip(chip)
    flops = model_flops(op.op.split("::")[-1], [t.shape for t in op.inputs],
                        [t.shape for t in op.outputs])
    nbytes = float(sum(t.numel * _itemsize(t.dtype) for t in list(op.inputs) + list(op.outputs)
                       if t.on_device))
    dtype = next((t.dtype for t in op.inputs), op.outputs[0].dtype if op.outputs else "float32")
    try:
        ns = roofline_ns(flops, nbytes, dtype, c, lnc=lnc)
    except (ValueError, KeyError):
        ns = roofline_ns(flops, nbytes, "float32", c, lnc=lnc)
    return _timing(op.name, ns, nbytes, flops, c, lnc, "roofline estimate (no lowering rule)")


def estimate_bytes(name: str, nbytes: float, chip, lnc: int = 1):
    """The estimate of an op whose tensors could not be described as an OpSpec (the eager
    backend's descriptor error): its bytes moved alone."""
    c = get_chip(chip)
    return _timing(name, roofline_ns(0.0, nbytes, "float32", c, lnc=lnc), nbytes, 0.0, c, lnc,
                   "bytes-only estimate (descriptor error)")


def _timing(name, roofline, nbytes, flops, c, lnc, note):
    from .api import Timing
    return Timing(roofline + 2 * c.dma_fixed_latency_s * 1e9,
                  {"DMA": nbytes / (c.hbm_bytes_per_s_per_core * lnc) * 1e9}, nbytes, flops, 0,
                  estimated=True, ops=(name,), note=note)
