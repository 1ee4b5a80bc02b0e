"""DMA instructions: ``dma_copy``."""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..tensor import NkiTensor

from ._common import _Ctx
from .enums import dge_mode, engine, oob_mode


def _contiguous_runs(t: NkiTensor) -> int:
    """Number of contiguous memory runs (DMA descriptors) needed to move this view."""
    dims = list(zip(t.shape, t.strides))
    start = 1 if t.on_chip else 0
    inner, expect = 1, 1
    for n, st in reversed(dims[start:]):
        if n == 1:
            continue
        if st != expect:
            break
        inner *= n
        expect *= n
    return max(1, t.size // max(inner, 1))


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
    nbytes = dst.size * dtypes.itemsize(dst.dtype)
    n_desc = max(_contiguous_runs(src), _contiguous_runs(dst))
    ctx.emit("dma", [src], [dst], bytes=nbytes, descriptors=n_desc, src_buffer=src.buffer,
             dst_buffer=dst.buffer, dge_mode=getattr(dge_mode, "value", str(dge_mode)),
             partitions=max(dst.num_partitions, src.num_partitions))

