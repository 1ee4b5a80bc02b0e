"""dma_transpose (NC-v3+): transpose a tile while moving it into SBUF: 2-D src[P, F] to dst[F, P]
(axes (1, 0)), 3-D [P, A, B] to [B, A, P] (axes (2, 1, 0)), 4-D [P, A, B, C] to [C, A, B, P]
(axes (3, 1, 2, 0)) [ISA]. Each moves src's partitions to dst's last dimension and src's last
dimension to dst's partitions, the dimensions between in place. Exact for 2- and 4-byte types;
HBM->SBUF reaches up to 90% of DMA throughput, SBUF->SBUF up to 50% [ArchV3]; cost as dma_copy
at that efficiency."""

from __future__ import annotations

from ...engines import DmaDir, Engine, Kind
from ...errors import CapabilityError, DtypeError, ProgramError
from ...numerics.formats import itemsize
from ...program.ap import Memory
from ..common import READ, Operand, make
from .dma_copy import cost, direction

NAME = "dma_transpose"
ENGINES = (Engine.DMA,)
OPERANDS = {"dst": Operand("write", (Memory.SBUF,), "transpose into SBUF, then dma_copy it out"),
            "src": READ}
_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def check_views(dst, src, axes=None, **_):
    """NKI's `axes` on the kernel's views (their dimensions before access patterns merge them):
    the one permutation of src's rank, giving dst's shape, in src's dtype."""
    perm = tuple(axes) if axes is not None else _AXES.get(src.ndim)
    if perm is None or perm != _AXES.get(len(perm)) or len(perm) != src.ndim:
        raise ProgramError(f"{NAME}: axes={axes} for a {src.ndim}-D src: supported are (1, 0), "
                           "(2, 1, 0) and (3, 1, 2, 0); reshape src to one of those ranks")
    want = [src.shape[a] for a in perm]
    if list(dst.shape) != want:
        raise ProgramError(f"{NAME}: dst must have shape {want} (src {list(src.shape)} permuted "
                           f"by {perm}), got {list(dst.shape)}")
    if dst.storage.dtype_name != src.storage.dtype_name:
        raise ProgramError(f"{NAME}: dst dtype {dst.storage.dtype_name} must equal src dtype "
                           f"{src.storage.dtype_name}; cast with a tensor_copy after the transpose")


def build(chip, dst, src, queue=None, engines=None, dge_mode="none", axes=None, oob_mode="error",
          priority=None):
    """`axes` is NKI's (checked by `check_views`); the pattern of every rank is the same move
    (module docstring). `queue`, `oob_mode` and `priority` as dma_copy's."""
    if not chip.has_tensor_transpose_mode:
        raise CapabilityError(NAME, "src", "a chip with DMA transpose (NeuronCore-v3 or newer)",
                              NAME, chip.name, "transpose on TensorE with nc_transpose")
    if itemsize(src.dtype) not in (2, 4):
        raise DtypeError(NAME, "src", "a 2- or 4-byte dtype", src.dtype, chip.name)
    d = direction(dst, src)
    eff = (chip.dma_transpose_sbuf2sbuf_efficiency if d == DmaDir.SBUF_TO_SBUF
           else chip.dma_transpose_hbm2sbuf_efficiency)
    queue = queue or 0
    c = cost(chip, dst, src, queue, engines, dge_mode, NAME, eff)
    return make(NAME, Engine.DMA, 0, 0, (src,), (dst,), {"queue": queue}, kind=Kind.DMA, dma=c)


def reference(x, last):
    """x [P, ..., last] (the dimensions between may be flattened) -> [last, ..., P]: src's
    partitions and last dimension swap places, the dimensions between stay (every rank's move)."""
    return x.reshape(x.shape[0], -1, last).transpose(2, 1, 0)


def semantics(state, emit):
    (src,), (dst,) = emit.reads, emit.writes
    if src.dtype == dst.dtype:      # bit-exact, any value
        state.write_raw(dst, reference(state.read_raw(src), dst.p_size))
    else:
        state.write(dst, reference(state.read(src), dst.p_size))
