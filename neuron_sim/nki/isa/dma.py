"""DMA instructions: ``dma_copy``."""

from __future__ import annotations

import numpy as np

from .. import dtypes

from ._common import _Ctx
from .enums import dge_mode, engine, oob_mode


def _dge(mode):
    """The descriptor mode the ISA module takes; `unknown` (the compiler's choice) is static."""
    m = getattr(mode, "value", str(mode))
    return m if m in ("none", "swdge", "hwdge") else "none"


def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=engine.unknown, name=None):
    ctx = _Ctx("dma_copy")
    ctx.tensor(dst, "dst")
    ctx.tensor(src, "src")
    for opname, t in (("dst", dst), ("src", src)):
        if t.buffer == "psum":
            ctx.fail(f"DMA cannot access PSUM ({opname}={t.storage.describe()}); copy PSUM to SBUF "
                     "with nisa.tensor_copy first")
        ctx.partitions(t, opname)
    if dst.size != src.size:
        ctx.fail(f"src has {src.size} elements but dst has {dst.size}; they must match")
    vals = None
    ctx.trace.check_initialized(src, "nisa.dma_copy", "src", ctx.loc)
    if ctx.numerics:
        raw = np.ascontiguousarray(src.np()).reshape(-1)
        if dtypes.normalize(src.dtype) != dtypes.normalize(dst.dtype):
            raw = raw.astype(np.float32)     # DMA casts through float32 [ISA]
        vals = raw
    ctx.write(dst, vals)
    ctx.emit("dma", [src], [dst], dst=dst, src=src, dge=_dge(dge_mode))



_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error,
                  name=None):
    """Transpose while moving (NC-v3+): 2-D [1, 0], 3-D [2, 1, 0], 4-D [3, 1, 2, 0] [ISA]."""
    ctx = _Ctx("dma_transpose")
    ctx.tensor(dst, "dst")
    ctx.tensor(src, "src")
    if not ctx.chip.has_tensor_transpose_mode:
        ctx.fail("dma_transpose needs NeuronCore-v3 or newer; transpose on TensorE with nisa.nc_transpose")
    ctx.onchip(dst, "dst", ("sbuf",))
    if src.buffer == "psum":
        ctx.fail(f"src must be in HBM or SBUF, found PSUM ({src.storage.describe()})")
    ctx.partitions(src, "src")
    perm = tuple(axes) if axes is not None else _TRANSPOSE_AXES.get(src.ndim)
    if perm is None or perm not in _TRANSPOSE_AXES.values() or len(perm) != src.ndim:
        ctx.fail(f"axes={axes} for a {src.ndim}-D src: supported are (1, 0), (2, 1, 0) and (3, 1, 2, 0)")
    want = tuple(src.shape[a] for a in perm)
    if tuple(dst.shape) != want:
        ctx.fail(f"dst must have shape {list(want)} (src {list(src.shape)} permuted by {perm}), got {list(dst.shape)}")
    if dst.storage.dtype_name != src.storage.dtype_name:
        ctx.fail(f"dst dtype {dst.storage.dtype_name} must equal src dtype {src.storage.dtype_name}")
    if src.storage.itemsize not in (2, 4):
        ctx.fail(f"DMA transpose moves 2- or 4-byte elements, src is {src.storage.dtype_name}")
    ctx.trace.check_initialized(src, "nisa.dma_transpose", "src", ctx.loc)
    ctx.write(dst, np.transpose(np.asarray(src.np()), perm) if ctx.numerics else None)
    ctx.emit("dma", [src], [dst], dst=dst, src=src, dge=_dge(dge_mode))
