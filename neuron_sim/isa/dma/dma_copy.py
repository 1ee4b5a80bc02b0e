"""dma_copy: move data HBM<->SBUF, SBUF->SBUF or HBM->HBM on the 16 DMA engines of the core,
casting through FP32 when the dtypes differ [DMAov][ISA]. There is no DMA path into PSUM [ArchV2].

Cost (ns) [DMAov][DMAbw], see hardware/assumptions.json:
  per engine of the spread: ceil(descriptors / engines) * descriptor_overhead
                            + (bytes / engines) / sustained engine rate
  HBM side: bytes touching HBM / the core's HBM share (shared by all transfers, FIFO)
  plus a fixed trigger-to-first-byte latency (overlaps other transfers) and, per queue, an issue
  interval: prebuilt descriptors ~50 ns; hardware DGE ~600 ns per instruction [DGE]; software DGE
  on GpSimd (assumed 1 us).
Descriptors: one per contiguous run per partition row, on whichever side has more [DMAov].

Indirect DMA (a gather or scatter): with `index`, an SBUF tile of integer indices [p, r], one
side is an `IndirectPattern` of HBM whose r rows per partition sit where the indices say
(element address + index * scale), one descriptor per index; software DGE only (GpSimd writes
the descriptors from the indices at run time [DGE]; NKI: a gather or scatter "using a list of
dynamic indices from SBUF" needs swdge). Indices outside [0, bound) raise ProgramError in the
NumPy run (`oob_mode='error'`, the hardware's default: a runtime error) or are skipped
(`'skip'`: that row is neither read nor written). `dst_rmw_op='add'` (NKI's nl.add, the one
read-modify-write op) adds src to dst instead of overwriting it, index by index in order, so
repeated indices accumulate (a scatter-add); it reads dst's bytes as well as writing them (cost:
dst's bytes twice through the engines and HBM), and takes oob_mode 'error' only."""

from __future__ import annotations

from math import ceil

import numpy as np

from ...engines import Dge, DmaDir, Engine, Kind
from ...errors import CapabilityError, DtypeError, FreeSizeError, ProgramError
from ...numerics.formats import np_dtype
from ...numerics.rounding import store
from ...program.ap import IndirectPattern, Memory
from ..common import READ, WRITE, DmaCost, Emit, Operand, check_operands

NAME = "dma_copy"
# "unknown": NKI's default, the compiler's choice, which is static descriptors here
_DGE = {"none": Dge.NONE, None: Dge.NONE, "static": Dge.NONE, "unknown": Dge.NONE, "swdge": Dge.SW,
        "sw": Dge.SW, "hwdge": Dge.HW, "hw": Dge.HW}
ENGINES = (Engine.DMA,)
OPERANDS = {"dst": WRITE, "src": READ,
            "index": Operand("read", (Memory.SBUF,), "load the indices into SBUF first")}
_OOB = ("error", "skip")


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


def cost(chip, dst, src, queue, engines, dge, name=NAME, efficiency=1.0, rmw=False) -> DmaCost:
    key = (id(chip), name, efficiency, queue, engines, dge, dst.geometry(), src.geometry(), rmw)
    hit = _COSTS.get(key)
    if hit is not None and hit[0] is chip:
        return hit[1]
    c = _cost(chip, dst, src, queue, engines, dge, name, efficiency, rmw)
    if len(_COSTS) > 4096:
        _COSTS.clear()
    _COSTS[key] = (chip, c)
    return c


def _cost(chip, dst, src, queue, engines, dge, name, efficiency, rmw) -> DmaCost:
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
    moved = nbytes * (2 if rmw else 1)             # a read-modify-write also reads dst
    engine_ns = ceil(desc / k) * chip.dma_descriptor_overhead_s * 1e9 + moved / k / rate_bpns
    hbm_sides = (src.memory == Memory.HBM) + (dst.memory == Memory.HBM) * (2 if rmw else 1)
    hbm_bytes = nbytes * hbm_sides
    hbm_ns = hbm_bytes / (chip.hbm_bytes_per_s_per_core / 1e9)
    mode = dge_of(chip, dge, name)
    issue = {Dge.NONE: chip.dma_static_issue_s, Dge.HW: chip.hwdge_instr_s,
             Dge.SW: chip.swdge_instr_s}[mode] * 1e9
    return DmaCost(moved, hbm_bytes, desc, k, int(queue) % chip.dma_engines_per_core, int(queue),
                   int(mode), int(d), engine_ns, hbm_ns, issue)


def build(chip, dst, src, queue=None, engines=None, dge_mode="none", oob_mode="error",
          priority=None, index=None, dst_rmw_op=None):
    """`queue` None: the program build chooses it (checked and costed as queue 0 until then).
    `index`: the SBUF index tile of an indirect DMA (module docstring); `oob_mode` applies to
    it (a direct access out of bounds is always an error). NKI's `priority` is taken and not
    modelled: queues have no priorities."""
    queue = queue or 0
    rmw = _rmw_op(chip, dst_rmw_op)
    oob = _oob(chip, oob_mode, rmw)
    if index is not None or isinstance(dst, IndirectPattern) or isinstance(src, IndirectPattern):
        _check_indirect(chip, dst, src, index, dge_mode)
        check_operands(NAME, chip, Engine.DMA, index=index)
    c = cost(chip, dst, src, queue, engines, dge_mode, rmw=rmw is not None)
    params = {"queue": queue}
    if index is not None or rmw:
        params.update(oob_mode=oob, dst_rmw_op=rmw)
    reads = (src,) if index is None else (src, index)
    # Emit(...) as make() would build it, without its conversions of constants
    return Emit(NAME, _DMA, _KIND_DMA, 0.0, 0.0, reads, (dst,), params, 0.0, c)


_DMA, _KIND_DMA = int(Engine.DMA), int(Kind.DMA)


def _name_of(x):
    """An NKI enum member or function (nisa.oob_mode.skip, nl.add, np.add) by its name."""
    x = getattr(x, "value", x)
    return getattr(x, "__name__", None) or str(x).lower().split(".")[-1]


def _rmw_op(chip, op):
    if op is None:
        return None
    if _name_of(op) != "add":
        raise CapabilityError(NAME, "dst_rmw_op", "None or add (the one read-modify-write op)",
                              op, chip.name)
    return "add"


def _oob(chip, mode, rmw):
    name = _name_of(mode)
    if name not in _OOB or rmw and name != "error":
        raise CapabilityError(NAME, "oob_mode", "'error'" if rmw else "'error' or 'skip'", mode,
                              chip.name, "a read-modify-write takes oob_mode 'error' only"
                              if rmw else "")
    return name


def _check_indirect(chip, dst, src, index, dge):
    """One side indirect, an [p, r] integer index tile beside it, software DGE."""
    side = dst if isinstance(dst, IndirectPattern) else src
    if index is None or not isinstance(side, IndirectPattern) \
            or isinstance(src, IndirectPattern) and isinstance(dst, IndirectPattern):
        raise ProgramError(f"{NAME}: an indirect DMA takes an index tile and one indirect "
                           "side (an IndirectPattern of HBM); the other side is a plain pattern")
    if dge_of(chip, dge) != Dge.SW:
        raise CapabilityError(NAME, "dge", "'swdge' for an indirect DMA (GpSimd writes its "
                              "descriptors from the indices)", dge, chip.name)
    if not index.dtype.startswith(("int", "uint")):
        raise DtypeError(NAME, "index", "an integer index tile", index.dtype, chip.name)
    want = (side.p_size, side.dims[0][0])
    if (index.p_size, index.free_size) != want:
        raise FreeSizeError(NAME, "index", f"{want[0]} partitions of {want[1]} indices (one "
                            "per row of the indirect side)",
                            f"{index.p_size} of {index.free_size}", chip.name)


def semantics(state, emit):
    src, *index = emit.reads
    (dst,) = emit.writes
    rmw = emit.params.get("dst_rmw_op")
    if not index:
        if rmw:
            state.write(dst, state.read(dst) + state.read(src).reshape(dst.shape))
        else:
            state.write(dst, state.read(src).reshape(dst.shape), exact_from=src)
        return
    skip = emit.params.get("oob_mode") == "skip"
    s_at, s_ok = _elements(state, src, index, skip)
    d_at, d_ok = _elements(state, dst, index, skip)
    ok = s_ok.reshape(-1) & d_ok.reshape(-1)        # element k of src goes to element k of dst
    s_flat, d_flat = state.buffer(src.tensor).reshape(-1), state.buffer(dst.tensor).reshape(-1)
    s_at, d_at = s_at.reshape(-1)[ok], d_at.reshape(-1)[ok]
    if rmw:     # in FP32, index by index (np.add.at: repeated indices add up), then rounded
        acc = d_flat.astype(np.float32)
        np.add.at(acc, d_at, s_flat[s_at].astype(np.float32))
        d_at = np.unique(d_at)
        vals = acc[d_at]
    elif src.dtype == dst.dtype:
        d_flat[d_at] = s_flat[s_at]
        return
    else:
        vals = s_flat[s_at].astype(np.float32)
    out = np.empty(vals.shape, np_dtype(dst.dtype))
    with np.errstate(over="ignore"):
        store(out, vals, dst.dtype, state.rounding, state.rng)
    d_flat[d_at] = out


def _elements(state, ap, index, skip):
    """The flat element indices ap reaches in its tensor (shape ap.shape) and which of them to
    move (False: an out-of-bounds index skipped). An IndirectPattern's rows sit at
    index * scale past its plain elements; an index outside [0, bound) raises unless skip."""
    t = ap.tensor
    row = int(np.prod(t.shape[1:], dtype=np.int64))
    shape = ap.shape
    at = np.full(shape, (ap.p_start - t.partition_start) * row + ap.offset, np.int64)
    pstride = (ap.p_stride if ap.p_size > 1 else row) if t.memory == Memory.HBM \
        else row * ap.p_stride
    for axis, step in enumerate((pstride,) + tuple(st for _, st in ap.dims)):
        at += (np.arange(shape[axis], dtype=np.int64) * step).reshape(
            (-1,) + (1,) * (len(shape) - axis - 1))
    ok = np.ones(shape, bool)
    if isinstance(ap, IndirectPattern):
        ix = state.read_raw(index[0]).reshape(shape[:2]).astype(np.int64)
        bad = (ix < 0) | (ix >= ap.bound)
        if bad.any() and not skip:
            q, i = np.argwhere(bad)[0]
            raise ProgramError(
                f"{NAME}: index {ix[q, i]} (partition {q}, position {i} of the index tile "
                f"{index[0].tensor.name!r}) is outside [0, {ap.bound}) of {t.name!r}, and "
                "oob_mode='error' makes that a runtime error: give indices inside the "
                "table, or oob_mode='skip' to leave those rows out")
        wide = (slice(None), slice(None)) + (None,) * (len(shape) - 2)
        at += np.where(bad, 0, ix * ap.scale)[wide]
        ok &= ~bad[wide]
    size = state.buffer(t).size
    if at.size and (at.min() < 0 or at.max() >= size):
        raise ProgramError(f"{NAME}: an access of {t.name!r} reaches its element "
                           f"{int(at.min() if at.min() < 0 else at.max())}, outside its {size} "
                           "elements: give access patterns inside their tensors")
    return at, ok


def reference(x):
    return np.array(x, copy=True)
