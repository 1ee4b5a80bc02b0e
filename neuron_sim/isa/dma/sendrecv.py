"""sendrecv: the two cores of an LNC=2 launch exchange SBUF tiles (NC-v3+) [ISA]: this core's
`src` goes to the other core's `dst` while the other core's `src` comes into this core's `dst`.
The k-th sendrecv of one core meets the k-th of the other (paired by program order [ISA]).

Two rows, both named sendrecv (`MEETS`): the signal, zero SyncE cycles once `src` is written
and `dst` free (the remote semaphore update [ISA]), then the transfer, a DMA that starts when
the other core's signal has landed (timing.simulate.simulate_cores: its signal time plus the
chip's core_pair_semaphore_latency_s) and writes `dst`. The transfer row stands for the other
core's transfer into this core's `dst`: the same bytes, started at the same meeting. It is
costed as an SBUF-to-SBUF dma_copy of `src` on this core's DMA engines, whose documented rate
applies: they reach any SBUF of the instance [ArchV3], and no other figure is published for
the path between the two cores of a pair. `dma_engine=gpsimd_dma` (the low-latency path) is
limited to 1024 B per partition [ISA] and otherwise costed alike; NKI's `pipe_id` is taken by
nisa.sendrecv and not modelled."""

from __future__ import annotations

import numpy as np

from ...engines import Engine, Kind
from ...errors import CapabilityError, DtypeError, FreeSizeError
from ...program.ap import Memory
from ..common import Emit, Operand, make
from . import dma_copy

NAME = "sendrecv"
ENGINES = (Engine.DMA,)
_HINT = "sendrecv exchanges SBUF tiles: copy the tile into SBUF first (nisa.dma_copy)"
OPERANDS = {"dst": Operand("write", (Memory.SBUF,), _HINT),
            "src": Operand("read", (Memory.SBUF,), _HINT)}
SAME_SHAPE = ("dst", "src")
MEETS = True                  # rows: the signal to the other core, then the transfer


def build(chip, dst, src, queue=None, dma_engine="dma"):
    if not chip.has_lnc2:
        raise CapabilityError(NAME, "src", "a chip with two NeuronCores per logical core (LNC=2, "
                              "NC-v3+)", f"{chip.name}, one NeuronCore per logical core",
                              chip.name, "there is no other core to exchange with: copy the "
                              "tile with dma_copy")
    if dst.dtype != src.dtype:
        raise DtypeError(NAME, "dst", f"the dtype of src ({src.dtype})", dst.dtype, chip.name)
    per_partition, most = src.nbytes // src.p_size, chip.sendrecv_gpsimd_dma_bytes_per_partition_max
    if getattr(dma_engine, "value", dma_engine) == "gpsimd_dma" and per_partition > most:
        raise FreeSizeError(NAME, "src", f"at most {most} B per partition with "
                            "dma_engine=gpsimd_dma", f"{per_partition} B", chip.name,
                            "exchange smaller tiles, or use dma_engine=dma")
    queue = queue or 0
    c = dma_copy.cost(chip, dst, src, queue, None, "none", NAME)
    return (make(NAME, Engine.SYNC, 0, 0, (src,), (dst,)),
            Emit(NAME, int(Engine.DMA), int(Kind.DMA), 0.0, 0.0, (src,), (dst,),
                 {"queue": queue}, 0.0, c))


def reference(peer_src):
    """This core's dst: the other core's src."""
    return np.array(peer_src, copy=True)


def semantics(state, emit):
    """One core's state holds no other core's tile: the transfer row writes `reference` of this
    core's src (what the other core receives; the NKI launch, which runs both cores, gives each
    dst the other's src). The signal row has no architectural effect."""
    if emit.dma is not None:
        (src,), (dst,) = emit.reads, emit.writes
        state.write(dst, reference(state.read(src)).reshape(dst.shape), exact_from=src)
