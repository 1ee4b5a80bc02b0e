"""dma_transpose (NC-v3+): transpose a 2-D tile while moving it, dst[F, P] = src[P, F].
Exact for 2- and 4-byte types; HBM->SBUF reaches up to 90% of DMA throughput, SBUF->SBUF up to
50% [ArchV3]; cost as dma_copy at that efficiency."""

from __future__ import annotations

from ...engines import DmaDir, Engine, Kind
from ...errors import CapabilityError, DtypeError
from ...numerics.formats import itemsize
from ..common import make
from .dma_copy import cost, direction

NAME = "dma_transpose"


def build(chip, dst, src, queue, engines=None, dge="none"):
    if not chip.has_tensor_transpose_mode:
        raise CapabilityError(NAME, "src", "a chip with DMA transpose (NC-v3+)", "dma_transpose",
                              chip.name, "transpose on TensorE with nc_transpose")
    if itemsize(src.dtype) not in (2, 4):
        raise DtypeError(NAME, "src", "a 2- or 4-byte dtype", src.dtype, chip.name)
    d = direction(dst, src)
    eff = (chip.dma_transpose_sbuf2sbuf_efficiency if d == DmaDir.SBUF_TO_SBUF
           else chip.dma_transpose_hbm2sbuf_efficiency)
    c = cost(chip, dst, src, queue, engines, dge, NAME, eff)
    return make(NAME, Engine.DMA, 0, 0, (src,), (dst,), {"queue": queue}, kind=Kind.DMA, dma=c)


def semantics(state, emit):
    (src,), (dst,) = emit.reads, emit.writes
    if src.dtype == dst.dtype:
        state.write_raw(dst, state.read_raw(src).reshape(src.p_size, -1).T)
    else:
        state.write(dst, state.read(src).reshape(src.p_size, -1).T.reshape(dst.shape))
