"""dma_copy: move data HBM<->SBUF, SBUF->SBUF or HBM->HBM on the 16 DMA engines of the core,
casting through FP32 when the dtypes differ [DMAov][ISA]. There is no DMA path into PSUM [ArchV2].

Cost (ns) [DMAov][DMAbw], see hardware/assumptions.json:
  per engine of the spread: ceil(descriptors / engines) * descriptor_overhead
                            + (bytes / engines) / sustained engine rate
  HBM side: bytes touching HBM / the core's HBM share (shared by all transfers, FIFO)
  plus a fixed trigger-to-first-byte latency (overlaps other transfers) and, per queue, an issue
  interval: prebuilt descriptors ~50 ns; hardware DGE ~600 ns per instruction [DGE]; software DGE
  on GpSimd (assumed 1 us).
Descriptors: one per contiguous run per partition row, on whichever side has more [DMAov]."""

from __future__ import annotations

from math import ceil

import numpy as np

from ...engines import Dge, DmaDir, Engine, Kind
from ...errors import CapabilityError, FreeSizeError
from ...program.ap import Memory
from ..common import READ, WRITE, DmaCost, Emit, check_operands

NAME = "dma_copy"
# "unknown": NKI's default, the compiler's choice, which is static descriptors here
_DGE = {"none": Dge.NONE, None: Dge.NONE, "static": Dge.NONE, "unknown": Dge.NONE, "swdge": Dge.SW,
        "sw": Dge.SW, "hwdge": Dge.HW, "hw": Dge.HW}
ENGINES = (Engine.DMA,)
OPERANDS = {"dst": WRITE, "src": READ}


_DIRECTION = {(Memory.HBM, Memory.SBUF): DmaDir.HBM_TO_SBUF,
              (Memory.SBUF, Memory.HBM): DmaDir.SBUF_TO_HBM,
              (Memory.SBUF, Memory.SBUF): DmaDir.SBUF_TO_SBUF,
              (Memory.HBM, Memory.HBM): DmaDir.HBM_TO_HBM}


def direction(dst, src):
    """The DmaDir of a copy from src to dst (None when either side is PSUM)."""
    return _DIRECTION.get((src.memory, dst.memory))


def dge_of(chip, dge, name=NAME):
    """The Dge of a `dge_mode` argument: a name, or NKI's enum member (nisa.dge_mode.hwdge)."""
    mode = _DGE.get(getattr(dge, "value", dge))
    if mode is None and dge is not None:
        mode = _DGE.get(str(dge).lower().split(".")[-1])
    if mode is None:
        raise CapabilityError(name, "dge", "'none', 'swdge' or 'hwdge'", dge, chip.name)
    if mode == Dge.HW and not chip.has_hwdge:
        raise CapabilityError(name, "dge", "a chip with hardware DGE (NC-v3+)", "hwdge", chip.name,
                              "use dge='none' (static descriptors) or 'swdge'")
    return mode


def compiler_queue(chip, dge, turns: dict) -> int:
    """The queue a compiler gives a DMA whose kernel left it open: every queue in turn, except
    for hardware-DGE DMAs: a DGE unit generates one instruction's descriptors at a time (~600 ns
    each [DGE]) and a core has `hwdge_units_per_core` of them (2 on Trn2, driven from SyncE and
    ScalarE [ArchV3]), so those take that many queues in turn; spread over all 16 they would
    generate descriptors 16 at a time (Trn3 publishes no unit count: all queues). `turns`: the
    program's next queue of each kind (updated)."""
    units = chip.hwdge_units_per_core if dge_of(chip, dge) == Dge.HW else 0
    kind, n = ("hwdge", units) if units else ("any", chip.dma_queues_per_engine)
    q = turns.get(kind, 0)
    turns[kind] = (q + 1) % n
    return q


# cost() by everything it reads of its operands (not their addresses in the free dimension:
# AccessPattern.geometry()):
# programs repeat a few DMA geometries thousands of times. Bounded; DmaCost is never modified.
_COSTS: dict = {}


def cost(chip, dst, src, queue, engines, dge, name=NAME, efficiency=1.0) -> DmaCost:
    key = (id(chip), name, efficiency, queue, engines, dge, dst.geometry(), src.geometry())
    hit = _COSTS.get(key)
    if hit is not None and hit[0] is chip:
        return hit[1]
    c = _cost(chip, dst, src, queue, engines, dge, name, efficiency)
    if len(_COSTS) > 4096:
        _COSTS.clear()
    _COSTS[key] = (chip, c)
    return c


def _cost(chip, dst, src, queue, engines, dge, name, efficiency) -> DmaCost:
    check_operands(name, chip, Engine.DMA, dst=dst, src=src)
    d = direction(dst, src)
    n_src, n_dst = src.p_size * src.free_size, dst.p_size * dst.free_size
    if n_src != n_dst:
        raise FreeSizeError(name, "dst", f"{n_src} elements like src", n_dst, chip.name)
    nbytes = float(max(src.nbytes, dst.nbytes))
    desc = max(src.p_size * src.contiguous_runs_per_partition,
               dst.p_size * dst.contiguous_runs_per_partition)
    sbuf_parts = max(ap.p_size for ap in (src, dst) if ap.memory == Memory.SBUF) \
        if Memory.SBUF in (src.memory, dst.memory) else chip.dma_engines_per_core
    k = int(engines) if engines else min(chip.dma_engines_per_core, max(1, sbuf_parts))
    k = max(1, min(k, chip.dma_engines_per_core))
    rate_bpns = chip.dma_engine_bytes_per_s * efficiency / 1e9
    engine_ns = ceil(desc / k) * chip.dma_descriptor_overhead_s * 1e9 + nbytes / k / rate_bpns
    hbm_sides = (src.memory == Memory.HBM) + (dst.memory == Memory.HBM)
    hbm_bytes = nbytes * hbm_sides
    hbm_ns = hbm_bytes / (chip.hbm_bytes_per_s_per_core / 1e9)
    mode = dge_of(chip, dge, name)
    issue = {Dge.NONE: chip.dma_static_issue_s, Dge.HW: chip.hwdge_instr_s,
             Dge.SW: chip.swdge_instr_s}[mode] * 1e9
    return DmaCost(nbytes, hbm_bytes, desc, k, int(queue) % chip.dma_engines_per_core, int(queue),
                   int(mode), int(d), engine_ns, hbm_ns, issue)


def build(chip, dst, src, queue=None, engines=None, dge_mode="none", oob_mode="error",
          priority=None):
    """`queue` None: the program build chooses it (checked and costed as queue 0 until then).
    NKI's `oob_mode` and `priority` are taken and not modelled: an access out of bounds is
    always an error, and queues have no priorities."""
    queue = queue or 0
    c = cost(chip, dst, src, queue, engines, dge_mode)
    # Emit(...) as make() would build it, without its conversions of constants
    return Emit(NAME, _DMA, _KIND_DMA, 0.0, 0.0, (src,), (dst,), {"queue": queue}, 0.0, c)


_DMA, _KIND_DMA = int(Engine.DMA), int(Kind.DMA)


def semantics(state, emit):
    (src,), (dst,) = emit.reads, emit.writes
    state.write(dst, state.read(src).reshape(dst.shape), exact_from=src)


def reference(x):
    return np.array(x, copy=True)
