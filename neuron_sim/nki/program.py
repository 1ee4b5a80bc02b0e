"""From traced kernels to the simulator core: one ``ProgramBuilder`` program per NeuronCore.

Each traced instruction becomes the builder call of the same name, which checks it again on the
chip and gives its cost (neuron_sim/isa/<engine>/<instr>.py). Dependencies:

- inside one tensor's lifetime, the builder finds read-after-write, write-after-read and
  write-after-write from the operands' regions, as the compiler's semaphores would;
- when the memory plan reuses the bytes of a dead tensor for a new one, a write to the new
  tensor waits for the last readers/writers of the old one's bytes it overwrites (the
  write-after-read the compiler enforces before overwriting a buffer). That is what bounds how
  far loop iterations can overlap: the deeper the free memory, the more iterations are in flight;
- a DMA into an SBUF tile whose readers take regions that partition its columns (the operands
  of matmuls) becomes one DMA per region (``_dma_pieces``), so a reused buffer is refilled
  region by region as each region's last readers finish.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from math import copysign
from operator import itemgetter

import numpy as np

from .. import errors as core_errors
from ..engines import Engine
from ..isa.common import Emit
from ..isa.dma import dma_copy as core_dma
from ..hardware import get_chip
from ..program.ap import AccessPattern, IndirectPattern, Memory, Tensor, check_inside
from ..program.builder import ProgramBuilder, module_spec, paused_gc
from . import dtypes
from .errors import NkiValidationError
from .tensor import IndirectView, NkiTensor
from .tracer import Finding

_MEM = {"sbuf": Memory.SBUF, "psum": Memory.PSUM}
_PSUM = Memory.PSUM     # (an enum member read from its class costs ~0.4 us, per new pattern)


@dataclass
class BuiltProgram:
    program: object
    core: int
    source_index: list = field(default_factory=list)    # program row -> (trace no, instr index)
    tensors: dict = field(default_factory=dict)          # storage id -> the program's Tensor


def _merge_dims(shape, strides):
    dims = [(int(n), int(s)) for n, s in zip(shape, strides) if n != 1]
    out = []
    for n, s in dims:
        if out and out[-1][1] == n * s:
            pn, _ = out.pop()
            out.append((pn * n, s))
        else:
            out.append((n, s))
    return tuple(out) or ((1, 1),)


class _AP(AccessPattern):
    """An AccessPattern made with its dependency footprint, from the view (the same as
    ``AccessPattern.box()``: see test_fast_box_matches_core_box). ``storage``: the traced
    storage it addresses; ``bytes``: [lo, hi) bytes of an on-chip view inside each partition,
    kept by ``_Mapper.byte_range`` when the storage stays at one address; ``geometry_id``: its
    geometry's number in _Records; ``num``: its row in _BulkRows' table."""

    __slots__ = ("storage", "bytes", "geometry_id", "num")


class _Mapper:
    """Views of traced storages -> the core's Tensor / AccessPattern objects."""

    def __init__(self, plan):
        self.plan = plan
        self.tensors = {}
        self.geometry = {}
        self.patterns = {}    # (storage id, shape, strides, offset) -> AccessPattern

    def tensor(self, st, index):
        t = self.tensors.get(st.id)
        if t is None:
            mem = _MEM.get(st.buffer, Memory.HBM)
            p0, addr = self.plan.address(st, index) if mem != Memory.HBM else (0, 0)
            t = Tensor(st.name, mem, st.shape, st.dtype_name, addr, p0)
            self.tensors[st.id] = t
        return t

    def _geo(self, shape, strides, on_chip):
        """(merged free dims, free span) of a view of this shape and strides."""
        key = (shape, strides, on_chip)
        geo = self.geometry.get(key)
        if geo is None:       # views of the same shape and strides recur thousands of times
            if on_chip or len(shape) >= 2:
                span = 0 if on_chip else (shape[0] - 1) * strides[0]
                for n, s in zip(shape[1:], strides[1:]):
                    if n > 0:
                        span += (n - 1) * s
                geo = (_merge_dims(shape[1:], strides[1:]), span)
            else:
                geo = (_merge_dims(shape, strides), (shape[0] - 1) * strides[0])
            self.geometry[key] = geo
        return geo

    def free_range(self, v: NkiTensor) -> tuple[int, int]:
        """[lo, hi) elements of an on-chip view inside each partition of its storage (the free
        extent of its dependency footprint)."""
        st = v.storage
        lo = v.offset % st.free_elems
        return lo, lo + self._geo(v.shape, v.strides, st.on_chip)[1] + 1

    def byte_range(self, ap: _AP, index) -> tuple[float, float]:
        """[lo, hi) bytes of an on-chip pattern inside each partition, at its address at `index`."""
        r = ap.bytes
        if r is not None:
            return r
        st = ap.storage
        _, _, lo, hi = ap._box          # the free extent, as free_range gives it
        addr = self.plan.address(st, index)[1]
        isz = st.itemsize
        r = addr + lo * isz, addr + hi * isz
        if len(self.plan.segments.get(st.id, ())) <= 1:     # one segment: one address
            ap.bytes = r
        return r

    def ap(self, v: NkiTensor, index) -> _AP:
        """The view's access pattern (kernels name one view object several times: a tile, the
        same slice of it in a loop): kept on the view, for this mapper (v._mapped)."""
        hit = v._mapped
        if hit is not None and hit[0] is self:
            return hit[1]
        if v.__class__ is IndirectView:
            ap = self._indirect(v, index)
        else:
            ap = self.ap_at(v.storage, v.shape, v.strides, v.offset, index)
        v._mapped = (self, ap)
        return ap

    def _indirect(self, v, index) -> _IndirectAP:
        """table[idx_tile, ...]: one row of the indexed dimension per index, its other
        dimensions as sliced; the row an index names sits index * the row stride further."""
        base, (p, r) = v.base, v.index.shape
        ap = _IndirectAP(self.tensor(base.storage, index), 0, p, base.offset,
                         ((r, 0),) + _merge_dims(base.shape[1:], base.strides[1:]), 0,
                         scale=base.strides[0], bound=base.shape[0])
        ap.storage, ap.bytes, ap.geometry_id, ap.num = base.storage, None, None, None
        return ap

    def aps(self, views, index) -> list:
        """[self.ap(v, index) for v in views]: an instruction's operands, views mapped already
        read where they are kept."""
        out = []
        for v in views:
            hit = v._mapped
            out.append(hit[1] if hit is not None and hit[0] is self else self.ap(v, index))
        return out

    def ap_at(self, st, shape, strides, offset, index) -> _AP:
        """The access pattern of the view (shape, strides, offset) of `st`. A storage's Tensor
        is fixed once made, so equal views give equal patterns: one object serves them all
        (kernels slice the same tile views in every loop iteration)."""
        key = (st.id, shape, strides, offset)
        ap = self.patterns.get(key)
        if ap is not None:
            return ap
        t = self.tensor(st, index)
        dims, span = self._geo(shape, strides, st.on_chip)
        if st.on_chip:      # (the view's partition_start and free offset in its storage)
            p0 = t.partition_start + offset // st.free_elems
            lo = offset % st.free_elems
            ap = _AP(t, p0, shape[0], lo, dims, 1, (p0, p0 + shape[0], lo, lo + span + 1))
        else:               # (in HBM a 1-D view is one row: its dims are all free)
            rows, row_stride = (shape[0], strides[0]) if len(shape) >= 2 else (1, 1)
            ap = _AP(t, 0, rows, offset, dims, row_stride, (0, 1, offset, offset + span + 1))
        # refused outside its tensor; a partition-broadcast view (partition stride 0) reads one
        # partition as many
        check_inside(ap, ap._box, 1 if strides[0] == 0 else shape[0])
        ap.storage, ap.bytes, ap.geometry_id, ap.num = st, None, None, None
        self.patterns[key] = ap
        return ap


class _IndirectAP(IndirectPattern):
    """An IndirectPattern with _AP's attributes (its footprint is the whole table)."""

    __slots__ = ("storage", "bytes", "geometry_id", "num")


def build_programs(traces, plans, lnc=1, records=True, bulk=True):
    """One BuiltProgram per physical core; SPMD instances are dealt round-robin to the cores.
    `records=False` builds every instruction through its ISA module (the plain path, see
    _Records); `bulk=False` appends the rows to the builder one by one (the readable path, and
    the one of the builder's reference mode), else they go to it in bulk (_BulkRows)."""
    recs = _Records() if records else None
    chip = get_chip(traces[0].target.name)
    n_cores = max(1, min(lnc, len(traces)))
    builders = [ProgramBuilder(chip, name=f"{traces[0].kernel_name}[core {c}]",
                               check_capacity=False) for c in range(n_cores)]
    sinks = [_BulkRows(b, recs) if bulk and recs is not None and not b.reference else _Rows(b, recs)
             for b in builders]
    built = [BuiltProgram(None, c) for c in range(n_cores)]
    with paused_gc():
        for k, (tr, plan) in enumerate(zip(traces, plans)):
            core = k % n_cores
            _emit_trace(sinks[core], built[core], k, tr, plan)
        for b, rows, out in zip(builders, sinks, built):
            rows.flush()
            out.program = b.build()
            if rows.__class__ is _BulkRows:     # template copies are made when asked for
                out.program.emits = _LazyRecords(out.program.emits)
    return built


# A dead buffer's last users are remembered per region (bytes and engine). Past this many
# regions, its last few users are kept for the whole buffer instead (the coarser rule), so a
# tile read element by element does not give every later write thousands of dependencies.
_MAX_REGIONS = 64
_COARSE_USERS = 8


def _emit_trace(rows, out: BuiltProgram, k, tr, plan):
    """The rows of trace `tr` (program instance k), appended through `rows` (_Rows/_BulkRows)."""
    m = _Mapper(plan)
    out.tensors = m.tensors
    graveyard = {"sbuf": [], "psum": []}       # (lo, hi, [(row, lo, hi)]) of dead buffers
    frontier = {}                               # storage id -> {((lo, hi), engine): last row}
    # storage id -> ([(row, lo, hi)] its bytes' previous users, {(lo, hi): those a write there
    # waits for})
    first_row_deps = {}
    # instruction index -> ([(storage id, segment)] starting there, [spills] before it,
    # [(storage id, segment)] ending there): when a storage's segment starts, it collects the
    # frontier of the dead buffers it overlaps
    events = {}
    for sid, segs in plan.segments.items():
        for s in segs:
            events.setdefault(s.start, ([], [], []))[0].append((sid, s))
            events.setdefault(s.end, ([], [], []))[2].append((sid, s))
    for before, sp in plan.spills:
        events.setdefault(before, ([], [], []))[1].append(sp)
    storages = {st.id: st for st in tr.storages}
    pieces = _dma_pieces(tr.instrs, m)

    def note(row, aps, i, engine):
        for ap in aps:
            st = ap.storage
            if st.on_chip:
                r = ap.bytes
                if r is None:
                    r = m.byte_range(ap, i)
                f = frontier.get(st.id)
                if f is None:
                    f = frontier[st.id] = {}
                f[r, engine] = row

    def reuse_deps(aps, i):
        # every write into a reused buffer waits for the previous occupant's last users of the
        # bytes it overwrites (a tile is written many times at the same few byte ranges: the
        # users found for a range are kept with the storage's list, sorted and unique: a tuple
        # returned is in the order the builder keeps explicit dependencies in)
        deps = ()
        for ap in aps:
            d = first_row_deps.get(ap.storage.id)
            if d:
                b = ap.bytes
                if b is None:
                    b = m.byte_range(ap, i)
                found = d[1].get(b)
                if found is None:
                    lo, hi = b
                    found = d[1][b] = tuple(sorted({r for r, a, z in d[0] if a < hi and lo < z}))
                if found:
                    deps = found if not deps else list(deps) + list(found)
        return deps

    source_index = out.source_index
    for ins in tr.instrs:
        i = ins.index
        ev = events.get(i)      # (most instructions start or end no buffer and have no spill)
        if ev is not None:
            _buffers_start(ev[0], storages, graveyard, first_row_deps)
            for sp in ev[1]:
                rows.flush()
                _emit_spill(rows.b, out, k, sp, m, i, note, reuse_deps)
        try:
            if i in pieces:
                row = rows.dma_pieces(ins, m, pieces[i], note, reuse_deps)
            else:
                writes = m.aps(ins.writes, i)
                deps = reuse_deps(writes, i)
                if ins.op == "dma_copy" and _indirect_or_rmw(ins.attrs):
                    row = rows.dma_indirect(ins, m, deps)
                elif ins.op == "dma_copy":
                    a = ins.attrs
                    row = rows.dma(m.ap(a["dst"], i), m.ap(a["src"], i), a["dge_mode"], deps)
                else:       # its ISA module's `build` on the arguments the nisa call recorded
                    row = rows.compute(ins, m, deps)
                note(row, writes + m.aps(ins.reads, i), i, ins.engine)
        except core_errors.NeuronSimError as e:
            raise NkiValidationError(str(e), ins.loc, f"nisa.{ins.op}") from e
        n = row + 1 - len(source_index)
        if n > 0:
            source_index.extend([(k, i)] * n)
        if ev is not None:
            _buffers_end(ev[2], storages, graveyard, frontier)


def _buffers_start(starts, storages, graveyard, first_row_deps) -> None:
    """Buffers coming alive (`starts`: (storage id, segment)) inherit the last users of the bytes
    they reuse, taken from the graveyard."""
    for sid, seg in starts:
        st = storages.get(sid)
        if st is None:
            continue
        gy = graveyard[st.buffer]
        lo, hi = seg.addr, seg.addr + seg.size
        deps = []
        keep = []
        for (glo, ghi, users) in gy:
            if glo < hi and lo < ghi:
                deps.extend(u for u in users if u[1] < hi and lo < u[2])
                if not (lo <= glo and ghi <= hi):
                    keep.append((glo, ghi, users))
            else:
                keep.append((glo, ghi, users))
        graveyard[st.buffer] = keep
        first_row_deps[sid] = (deps, {}) if deps else None


def _buffers_end(ends, storages, graveyard, frontier) -> None:
    """Buffers dying (`ends`: (storage id, segment)) become graveyard entries: their bytes and
    the last users of each region (_MAX_REGIONS)."""
    for sid, seg in ends:
        st = storages.get(sid)
        if st is None or not st.on_chip:
            continue
        glo, ghi = seg.addr, seg.addr + seg.size
        users = sorted((r, lo, hi) for ((lo, hi), _), r in frontier.pop(sid, {}).items())
        if len(users) > _MAX_REGIONS:
            users = [(r, glo, ghi) for r, _, _ in users[-_COARSE_USERS:]]
        graveyard[st.buffer].append((glo, ghi, users))


def _dma_pieces(instrs, m):
    """DMA index -> the column ranges to split it into, one DMA each. A dma_copy into an SBUF
    tile is split when the instructions that read the tile before it is next written take
    regions that partition its columns (e.g. the [128, 128] stationary or [128, 512] moving
    operands matmuls take from a loaded block). The compiler orders a DMA after the readers of
    the memory it overwrites at this granularity, so a reused buffer is refilled piece by piece
    as each piece's last readers finish, not after the last reader of the whole tile."""
    # storage id -> (los, [[dma index, lo, hi, read ranges or None]]) of the windows still open,
    # sorted by lo, and the ids of the views read since they last changed (reading a view again
    # changes nothing; the trace keeps the views, so their ids are not reused). A DMA's write
    # first closes the open windows it overlaps, so the open windows of a storage never overlap:
    # those a range meets are a run found by bisection.
    windows = {}
    out = {}

    def close(w):
        i, lo, hi, reads = w
        if not reads or len(reads) < 2:
            return      # unread, read whole, or read across the pieces
        iv = sorted(reads)
        if iv[0][0] == lo and iv[-1][1] == hi and all(x[1] == y[0] for x, y in zip(iv, iv[1:])):
            out[i] = [(a - lo, z - lo) for a, z in iv]

    def meeting(los, a, z):
        """Indices of the windows [lo, hi) that [a, z) overlaps (windows sorted, disjoint)."""
        k = bisect_right(los, a) - 1
        if k < 0:
            k = 0
        n = bisect_left(los, z, k)
        return range(k, n)

    for ins in instrs:
        for v in ins.reads:
            ws = windows.get(v.storage.id)
            if not ws or not ws[0] or id(v) in ws[2]:
                continue
            ws[2].add(id(v))
            a, z = m.free_range(v)
            for k in meeting(ws[0], a, z):
                w = ws[1][k]
                if w[3] is not None and a < w[2] and w[1] < z:
                    if w[1] <= a and z <= w[2]:
                        w[3].add((a, z))
                    else:
                        w[3] = None
        for v in ins.writes:
            ws = windows.get(v.storage.id)
            if ws and ws[0]:
                a, z = m.free_range(v)
                hit = [k for k in meeting(ws[0], a, z) if a < ws[1][k][2] and ws[1][k][1] < z]
                for k in reversed(hit):
                    close(ws[1][k])
                    del ws[0][k], ws[1][k]
                if hit:
                    ws[2].clear()
        if ins.op == "dma_copy" and _splittable(ins.writes[0], ins.reads[0]) \
                and not _indirect_or_rmw(ins.attrs):
            lo, hi = m.free_range(ins.writes[0])
            los, wl, seen = windows.setdefault(ins.writes[0].storage.id, ([], [], set()))
            seen.clear()
            k = bisect_right(los, lo)
            los.insert(k, lo)
            wl.insert(k, [ins.index, lo, hi, set()])
    for _, wl, _ in windows.values():
        for w in wl:
            close(w)
    return out


def _indirect_or_rmw(attrs) -> bool:
    """A dma_copy by an index tile or adding to dst: built whole with those arguments."""
    return attrs.get("index") is not None or attrs.get("dst_rmw_op") is not None


def _splittable(dst, src):
    """A 2-D copy into SBUF whose free dim is contiguous, so element ranges are column slices."""
    return (dst.storage.buffer == "sbuf" and dst.ndim == 2 and dst.strides[1] == 1
            and src.shape == dst.shape)


def _emit_spill(b, out, k, sp, m, i, note, reuse_deps):
    st, source = sp.attrs["storage"], sp.attrs.get("source")
    whole = m.ap(NkiTensor(st), i)
    slot = ("spill", st.id)         # the HBM tensor it is stored to (none for a clean copy)
    if source is None and slot not in m.tensors:
        m.tensors[slot] = Tensor(f"{st.name}.spill", Memory.HBM, st.shape,
                                 dtypes.name_of(st.dtype))
    if sp.attrs["when"] == "store":
        row = b.dma_copy(m.tensors[slot].ap(), whole)
    else:   # the reload writes the tensor's new bytes: wait for their previous users
        d = reuse_deps([whole], i)
        deps = {"deps": d} if d else {}
        if source is not None:      # a clean copy of HBM data: fetch it again
            row = b.spill_refetch(whole, m.ap(source, i), **deps)
        else:
            row = b.dma_copy(whole, m.tensors[slot].ap(), **deps)
    out.source_index.append((k, -1))
    note(row, [whole], i, "dma")


def _args(attrs, m, index):
    """The nisa call's arguments, views mapped to access patterns."""
    return {k: m.ap(v, index) if v.__class__ is NkiTensor else v for k, v in attrs.items()}


class _Rows:
    """Appends each row to the builder as it is made (the readable path). `records`: a _Records
    (compute records made once per geometry) or None (every one built by its module)."""

    def __init__(self, b: ProgramBuilder, records):
        self.b, self.records = b, records

    def compute(self, ins, m, deps) -> int:
        b, op = self.b, ins.op
        if self.records is None:
            return b.instruction(op, deps=deps, **_args(ins.attrs, m, ins.index))
        t, aps, out = self.records.template(b, op, ins.attrs, m, ins.index)
        return self._pass(op, out if t is None else _from_template(t, aps), deps)

    def _pass(self, op, out, deps) -> int:
        return self.b.append_built(op, out, deps)

    def dma(self, dst, src, dge, deps=()) -> int:
        """A dma_copy on the queue the compiler gives it (_queue). The cost module keeps its cost
        per geometry and queue: a kernel's DMAs repeat a few shapes."""
        b = self.b
        return b.append(core_dma.build(b.chip, dst, src, _queue(b, dge), None, dge), deps=deps)

    def dma_indirect(self, ins, m, deps) -> int:
        """A gather, scatter or read-modify-write dma_copy, on the queue the compiler gives it."""
        a, i, b = ins.attrs, ins.index, self.b
        index = a["index"]
        e = core_dma.build(b.chip, m.ap(a["dst"], i), m.ap(a["src"], i), _queue(b, a["dge_mode"]),
                           None, a["dge_mode"], a["oob_mode"], None,
                           None if index is None else m.ap(index, i), a["dst_rmw_op"])
        return self._pass("dma_copy", e, deps)

    def dma_pieces(self, ins, m, cols, note, reuse_deps) -> int:
        """One dma_copy per column range, each ordered after the previous users of its own
        bytes. Returns the last one's row."""
        dst, src, i = ins.writes[0], ins.reads[0], ins.index
        dge, engine, ap_at = ins.attrs["dge_mode"], ins.engine, m.ap_at
        # the patterns of dst[:, c0:c1] and src[:, c0:c1] (`_splittable`: the columns are in range)
        dst_st, dp, ds, do = dst.storage, dst.shape[0], dst.strides, dst.offset
        src_st, sp, ss, so = src.storage, src.shape[0], src.strides, src.offset
        for c0, c1 in cols:
            d = ap_at(dst_st, (dp, c1 - c0), ds, do + c0 * ds[1], i)
            s = ap_at(src_st, (sp, c1 - c0), ss, so + c0 * ss[1], i)
            row = self.dma(d, s, dge, reuse_deps((d,), i))
            note(row, (d, s), i, engine)
        return row

    def flush(self) -> None:
        pass


class _BulkRows(_Rows):
    """Keeps the rows as flat lists and hands them to the builder in one append_rows call per
    run of rows (a spill, appended by the builder itself, ends a run): the program is the one
    _Rows builds (tests/nki/test_nki_program.py). The builder then never sees a row alone, so
    the TensorE stationary reuse append_built decides is decided here, the same way: an
    nc_matmul's LoadStationary is left out when the same pattern, not written since, is still
    loaded."""

    def __init__(self, b: ProgramBuilder, records):
        super().__init__(b, records)
        self.first = 0              # index of the first row not handed over (set at a run's start)
        self.stationary = None      # (pattern, its tensor's writes so far) last loaded
        self.classes, self.class_of = [], {}    # distinct records the rows' columns come from
        self.plans = {}             # id(template) -> _plan (the template is kept: ids unique)
        self.dma_class = {}         # (dst geometry, src geometry, queue, dge) -> class
        # per numbered pattern, flat (np.array takes a flat list ~1.6x as fast as one of tuples):
        # its tensor id, then AccessPattern.record() (p0, p1, f0, f1, p_start, offset)
        self.table = []
        self._clear()

    def _clear(self):
        self.rec, self.nx, self.x_idx, self.emits = [], [], [], []
        self.nr, self.nw, self.acc = [], [], []
        self.writes = {}            # tensor id -> rows written since the last flush

    def _num(self, ap) -> int:
        n = ap.num if ap.__class__ is _AP else None
        if n is None:
            n = len(self.table) // 7
            self.table.append(ap.tensor.id)
            self.table.extend(ap.record())
            if ap.__class__ is _AP:
                ap.num = n
        return n

    def _class(self, e) -> int:
        """The number of record e's class: what the builder's columns take from a record."""
        key = (e.name, e.engine, e.kind, e.ii_cycles, e.lat_cycles, e.flops,
               None if e.dma is None else id(e.dma))
        c = self.class_of.get(key)
        if c is None:       # (the record is kept, so the id of its DmaCost is not reused)
            c = self.class_of[key] = len(self.classes)
            self.classes.append(e)
        return c

    def _add(self, e, deps=()) -> int:
        c = self._class(e)
        if not self.rec:
            self.first = len(self.b)
        self.rec.append(c)
        self._explicit(deps)
        acc, num = self.acc, self._num
        for a in e.reads:
            acc.append(num(a))
        writes = self.writes
        for a in e.writes:
            acc.append(num(a))
            t = a.tensor.id
            writes[t] = writes.get(t, 0) + 1
        self.nr.append(len(e.reads))
        self.nw.append(len(e.writes))
        self.emits.append(e)
        return self.first + len(self.rec) - 1

    def _explicit(self, deps) -> None:
        """The next row's explicit dependencies (earlier rows), sorted and unique."""
        if deps:
            d = deps if deps.__class__ is tuple or len(deps) == 1 else sorted(set(deps))
            self.nx.append(len(d))
            self.x_idx.extend(d)
        else:
            self.nx.append(0)

    def _version(self, tensor) -> int:
        """Writes of `tensor` so far (the builder's count, plus the rows not handed over yet)."""
        return self.b._versions.get(tensor.id, 0) + self.writes.get(tensor.id, 0)

    def compute(self, ins, m, deps) -> int:
        op = ins.op
        t, aps, out = self.records.template(self.b, op, ins.attrs, m, ins.index)
        if t is None:
            return self._pass(op, out, deps)
        # copies of template t: each row's class and operand numbers come from the template's
        nums = [a.num for a in aps]
        if None in nums:
            nums = [self._num(a) for a in aps]
        made = _Later(_from_template, t, aps)   # its records, made when Program.emits is read
        plan = self.plans.get(id(t))
        if plan is None:
            plan = self._plan(op, t)
        if not self.rec:
            self.first = len(self.b)
        reuse, recs, seq = plan[0], plan[1], plan[2]
        last = len(recs) - 1
        if not reuse or not last:
            if seq and not reuse and recs[-1][5] == Engine.TENSOR:
                self.stationary = None
            self._append(plan[4], aps, nums, made, seq, deps)
        elif last == 1:     # a TensorE pass: its LoadStationary, unless that pattern is loaded
            self._append(plan[5] if self._loaded(aps[recs[0][4]]) else plan[4], aps, nums, made,
                         seq, deps)
        else:
            for j in range(last + 1):
                if j == last or not self._loaded(aps[recs[j][4]]):
                    self._append(_run(recs, (j,)), aps, nums, made, seq, deps if j == last else ())
        return self.first + len(self.rec) - 1

    def _loaded(self, ap) -> bool:
        """As _pass: whether the LoadStationary of `ap` can be left out (the same pattern, not
        written since, is still loaded); if not, it is the one loaded now."""
        v, s = self._version(ap.tensor), self.stationary
        if s is not None and s[1] == v and _same(s[0], ap):
            return True
        self.stationary = (ap, v)
        return False

    def _append(self, run, aps, nums, made, seq, deps) -> None:
        """The rows of `run` (_run) of a copy of a template, naming the patterns `aps` (numbered
        `nums`); the last row's explicit dependencies are `deps`."""
        cs, nrs, nws, take, wpos, js, zeros = run
        self.rec.extend(cs)
        self.nx.extend(zeros)
        self._explicit(deps)
        self.acc.extend(take(nums))
        writes = self.writes
        for q in wpos:
            tid = aps[q].tensor.id
            writes[tid] = writes.get(tid, 0) + 1
        self.nr.extend(nrs)
        self.nw.extend(nws)
        if seq:
            self.emits.extend([(made, j) for j in js])
        else:
            self.emits.append(made)

    def _plan(self, op, t):
        """(reuses the stationary, per template record (class, reads, writes, written argument
        positions, first read's position, engine, operand positions), whether the build is a
        sequence, the template, _run of all records, _run of the last alone) of template t: what
        _pass and _add do for each copy, found once."""
        out = []
        for e, rd, wr, _, _ in t[1]:
            out.append((self._class(e), len(rd), len(wr), wr, rd[0] if rd else None, e.engine,
                        rd + wr))
        last = len(out) - 1
        plan = self.plans[id(t)] = (module_spec(op)[2], out, t[0] is not None, t,
                                    _run(out, range(last + 1)), _run(out, (last,)))
        return plan

    def _pass(self, op, out, deps) -> int:
        """Append the records `out` of instruction `op` as ProgramBuilder.append_built does: a
        TensorE pass's LoadStationary is left out when nc_matmul's stationary is still loaded."""
        if not isinstance(out, (tuple, list)):
            return self._add(out, deps)
        reuse = module_spec(op)[2]     # skips a LoadStationary of the pattern still loaded
        for em in out[:-1]:
            if not (reuse and self._loaded(em.reads[0])):
                self._add(em)
        last = out[-1]
        if not reuse and last.engine == Engine.TENSOR:
            self.stationary = None
        return self._add(last, deps)

    def dma(self, dst, src, dge, deps=(), queue=None) -> int:
        """_Rows.dma without the record: its class is found by the operands' geometries, the
        queue and the DGE mode (what the cost reads of them), and the record is made when
        Program.emits is read (_Later). `queue`: the one _queue gave it already."""
        q = _queue(self.b, dge) if queue is None else queue
        geo = self.records._geometry_id
        g, h = dst.geometry_id, src.geometry_id
        key = (g if g is not None else geo(dst), h if h is not None else geo(src), q, dge)
        c = self.dma_class.get(key)
        if c is None:
            c = self.dma_class[key] = len(self.classes)
            self.classes.append(core_dma.build(self.b.chip, dst, src, q, None, dge))
        n, m = src.num, dst.num
        n = n if n is not None else self._num(src)          # numbered src first, then dst
        return self._dma_row(c, n, m if m is not None else self._num(dst), src, dst, deps)

    def _dma_row(self, c, src_num, dst_num, src, dst, deps) -> int:
        """Append a dma_copy row of class c whose operands are numbered src_num and dst_num
        (`src` as _dma_record takes it); its explicit dependencies are `deps`."""
        if not self.rec:
            self.first = len(self.b)
        self.rec.append(c)
        self._explicit(deps)
        self.acc += (src_num, dst_num)
        t, writes = dst.tensor.id, self.writes
        writes[t] = writes.get(t, 0) + 1
        self.nr.append(1)
        self.nw.append(1)
        self.emits.append(_Later(_dma_record, self.classes[c], src, dst))
        return self.first + len(self.rec) - 1

    def dma_pieces(self, ins, m, cols, note, reuse_deps) -> int:
        """_Rows.dma_pieces' rows, as `dma` appends them one by one: the pieces of a split DMA
        differ only in their columns, so a piece of an HBM source whose geometry and class
        (per queue) are known is numbered from its box, its pattern made when its record is
        asked for (_dma_record); a split load of a [128, 2048] tile is 16 pieces."""
        dst, src, i = ins.writes[0], ins.reads[0], ins.index
        dge, engine, ap_at = ins.attrs["dge_mode"], ins.engine, m.ap_at
        dst_st, dp, ds, do = dst.storage, dst.shape[0], dst.strides, dst.offset
        src_st, sp, ss, so = src.storage, src.shape[0], src.strides, src.offset
        direct = not src_st.on_chip     # else every piece is a pattern (its box is per partition)
        geo, dma_class, table = self.records._geometry_id, self.dma_class, self.table
        widths = {}         # piece width -> (source geometry id, record, offset) of its first piece
        dst_geo = {}        # piece width -> its geometry id (pieces differ only in their columns)
        tid = m.tensor(src_st, i).id
        for c0, c1 in cols:
            w = c1 - c0
            d = ap_at(dst_st, (dp, w), ds, do + c0 * ds[1], i)
            off = so + c0 * ss[1]
            q = _queue(self.b, dge)
            g = d.geometry_id
            if g is None:
                g = dst_geo.get(w)
                if g is None:
                    g = dst_geo[w] = geo(d)
                else:
                    d.geometry_id = g
            known = widths.get(w) if direct else None
            c = dma_class.get((g, known[0], q, dge)) if known is not None else None
            if c is None:                # a pattern for this piece: the plain path
                s = ap_at(src_st, (sp, w), ss, off, i)
                if direct:
                    gid = s.geometry_id if s.geometry_id is not None else geo(s)
                    widths[w] = (gid, s.record(), off)
                row = self.dma(d, s, dge, reuse_deps((d,), i), queue=q)
                note(row, (d, s), i, engine)
                continue
            deps = reuse_deps((d,), i)
            n = d.num
            if n is None:
                n = self._num(d)
            # the first piece's record moved by the offset: a piece is the same pattern further on
            # (p0, p1, f0, f1, p_start, offset): AccessPattern.record()
            r, step = known[1], off - known[2]
            table.extend((tid, r[0], r[1], r[2] + step, r[3] + step, r[4], r[5] + step))
            row = self._dma_row(c, len(table) // 7 - 1, n, (m, src_st, (sp, w), ss, off), d, deps)
            note(row, (d,), i, engine)
        return row

    def flush(self) -> None:
        n = len(self.rec)
        if not n:
            return
        x_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(self.nx, out=x_ptr[1:])
        nr, nw = np.array(self.nr, np.int64), np.array(self.nw, np.int64)
        acc_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(nr + nw, out=acc_ptr[1:])
        write = np.repeat(np.tile(np.array([0, 1], np.int64), n), np.stack([nr, nw], 1).ravel())
        tab = np.array(self.table, np.int64).reshape(-1, 7)[np.array(self.acc, np.int64)]
        self.b.append_rows(self.classes, np.array(self.rec, np.int64), x_ptr,
                           np.array(self.x_idx, np.int64), acc_ptr, tab[:, 0].copy(), write,
                           tab[:, 1:5].copy(), tab[:, 5].copy(), tab[:, 6].copy(), self.emits)
        self._clear()


def _run(records, js):
    """(classes, reads, writes, operand taker, written positions, record numbers, zeros) of the
    rows of records js of a _plan, as _pass appends them one by one: the taker gives their
    operands' numbers in order from the template's argument numbers."""
    rs = [records[j] for j in js]
    ops = [p for r in rs for p in r[6]]
    take = itemgetter(*ops) if len(ops) > 1 else lambda n, j=tuple(ops): [n[x] for x in j]
    return (tuple(r[0] for r in rs), tuple(r[1] for r in rs), tuple(r[2] for r in rs), take,
            tuple(q for r in rs for q in r[3]), tuple(js), (0,) * (len(rs) - 1))


def _same(a, b) -> bool:
    """a == b for access patterns, the offsets compared first (most unequal patterns a kernel
    compares differ there, and the dataclass's == builds a tuple of each)."""
    return a is b or (a.offset == b.offset and a == b)


class _Records:
    """The records of compute instructions, built once per geometry. A kernel repeats a few
    instruction geometries thousands of times (C4: 32,768 matmuls of a handful), and an ISA
    module's `build` reads of its operands only their geometry (memory, dtype, partition start
    and size, dims), and for PSUM their placement (bank checks); the same arguments with the same
    operand geometries give the same records but for which patterns they name. So the first
    build of a geometry is kept as a template and the next ones are copies with their own
    patterns. DMA records (the queue rotates) and instructions whose records name a pattern that
    is not one of their arguments are built every time. build_programs(records=False) builds
    every instruction (the plain path; tests/nki/test_nki_program.py compares the two)."""

    def __init__(self):
        self.templates = {}
        self.geometries = {}

    def template(self, b, op, args, m, index):
        """(template, the argument patterns, None) when the geometry has a template, else
        (None, the argument patterns, the records built by the module). `args` are the traced
        call's, views mapped to patterns here by m (at instruction `index`)."""
        parts, aps = [], []
        for v in args.values():
            c = v.__class__
            if c is NkiTensor:
                hit = v._mapped         # m.ap(v, index), inline
                v = hit[1] if hit is not None and hit[0] is m else m.ap(v, index)
                g = v.geometry_id           # the argument's geometry
                if g is None:
                    g = self._geometry_id(v)
                parts.append(g)
                aps.append(v)
            elif c is float:                # -0.0 == 0.0: the sign is part of the key
                parts.append((v, copysign(1.0, v)))
            else:
                parts.append((c, v))
        if len(aps) > 1 and len(set(map(id, aps))) < len(aps):
            # a pattern named twice: which argument first named each
            parts.append(tuple([[a is x for a in aps].index(True) for x in aps]))
        key = (op, tuple(args), tuple(parts))
        try:
            t = self.templates.get(key, False)
        except TypeError:           # an unhashable argument (a list, an array): build it
            t = None
        if t:
            return t, aps, None
        out = b.build_instruction(op, **_args(args, m, index))
        if t is False:
            self.templates[key] = _template(out, aps)
        return None, aps, out

    def _geometry_id(self, ap):
        """A number per operand geometry (a key of small numbers hashes faster than the nested
        geometry tuples)."""
        g = ((ap.geometry(), ap.offset, ap.tensor.byte_offset) if ap.tensor.memory is _PSUM
             else ap.geometry())
        g = self.geometries.setdefault(g, len(self.geometries))
        ap.geometry_id = g
        return g


def _template(out, aps):
    """(emits, their reads' and writes' argument positions, params' pattern positions) of one
    build, or None when it cannot be copied (see _Records)."""
    pos = {}
    for j, ap in enumerate(aps):
        pos.setdefault(id(ap), j)   # a pattern named twice: its first argument (in the key)
    emits = out if isinstance(out, (tuple, list)) else (out,)
    t, groups = [], {}      # id(params dict) -> its number (nc_matmul's two records share one)
    for e in emits:
        if e.dma is not None:
            return None
        try:
            rd = tuple(pos[id(a)] for a in e.reads)
            wr = tuple(pos[id(a)] for a in e.writes)
        except KeyError:
            return None
        in_params = [(k, v) for k, v in e.params.items() if isinstance(v, AccessPattern)]
        if any(id(v) not in pos for _, v in in_params):
            return None
        sub = tuple((k, pos[id(v)]) for k, v in in_params)
        t.append((e, rd, wr, sub, groups.setdefault(id(e.params), len(groups))))
    return (out.__class__ if isinstance(out, (tuple, list)) else None, t, len(groups))


def _from_template(t, aps):
    """The records of a build like the template's, naming the patterns `aps`."""
    kind, emits, n_params = t
    made = []
    shared = [None] * n_params      # the copies of the template's params dicts
    for e, rd, wr, sub, g in emits:
        params = shared[g]
        if params is None:
            params = shared[g] = dict(e.params)
            for k, j in sub:
                params[k] = aps[j]
        made.append(Emit(e.name, e.engine, e.kind, e.ii_cycles, e.lat_cycles,
                         tuple([aps[j] for j in rd]), tuple([aps[j] for j in wr]), params,
                         e.flops, None))
    return made[0] if kind is None else kind(made)


class _Later:
    """Records made the first time one of them is asked for, by make(*args): a copy of a
    template (_from_template) or a dma_copy's record (_dma_record). _BulkRows hands the builder
    this (a single record) or (this, j) (record j of a sequence) per row instead of the records."""

    __slots__ = ("make", "args", "made")

    def __init__(self, make, *args):
        self.make, self.args, self.made = make, args, None

    def get(self):
        if self.made is None:
            self.made = self.make(*self.args)
        return self.made

    @property
    def name(self):         # what the builder's deadlock error reads of a record
        return self.get().name


def _dma_record(e, src, dst):
    """A dma_copy's record from the first record of its class (same cost, same queue), with its
    own operands. `src` may be (mapper, storage, shape, strides, offset): the view whose pattern
    is made now (_BulkRows.dma_pieces)."""
    if src.__class__ is tuple:
        m, st, shape, strides, off = src
        src = m.ap_at(st, shape, strides, off, None)
    return Emit(e.name, e.engine, e.kind, e.ii_cycles, e.lat_cycles, (src,), (dst,),
                dict(e.params), e.flops, e.dma)


class _LazyRecords:
    """Program.emits of a _BulkRows program: a template copy's records are made when read
    (a kernel's timing never reads them; the semantics check and tests do)."""

    def __init__(self, rows):
        self._rows = rows

    def __len__(self):
        return len(self._rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        e = self._rows[i]
        c = e.__class__
        if c is _Later:
            e = self._rows[i] = e.get()
        elif c is tuple:
            e = self._rows[i] = e[0].get()[e[1]]
        return e


def _queue(b, dge) -> int:
    """The queue of builder b's next dma_copy (dma_copy.compiler_queue)."""
    return core_dma.compiler_queue(b.chip, dge, b.__dict__.setdefault("_nki_dma_turns", {}))


def check_semantics(traces, built, rtol=1e-2, atol=1e-2) -> list[str]:
    """Debug mode (the slow version is the specification): run the built program through the ISA
    modules' NumPy semantics (neuron_sim.interpreter) from the kernel's inputs and compare each
    tensor the kernel returns with what the traced nisa calls computed. Returns what differs
    (empty: they agree). One program per launch, numerics traced, inputs not written in place;
    the tolerance covers bfloat16 rounding done in a different order."""
    from ..interpreter import State, execute
    if len(traces) != 1 or not traces[0].numerics:
        return ["not checked: the semantics check takes one traced program with numerics"]
    tr, bp = traces[0], built[0]
    written = {v.storage.id for ins in tr.instrs for v in ins.writes}
    inputs = [st for st in tr.storages if st.role == "input" and st.id in bp.tensors]
    if any(st.id in written for st in inputs):
        return ["not checked: the kernel writes an input in place (its first values are gone)"]
    state = State()
    for st in inputs:
        state.load(bp.tensors[st.id], st.data)
    execute(bp.program, state=state)
    bad = []
    for st in tr.storages:
        t = bp.tensors.get(st.id)
        if st.role != "output" or t is None:
            continue
        got = state.buffer(t).astype(np.float32)
        want = np.asarray(st.data, np.float32)
        if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            err = np.nanmax(np.abs(got - want))
            bad.append(f"output {st.describe()}: the ISA semantics give values up to {err:.3g} "
                       f"away from the traced result")
    return bad


def simulate_programs(traces, plans, lnc=1, check=False):
    """Build and time one program per core (`check`: and run `check_semantics` on them)."""
    built = build_programs(traces, plans, lnc=lnc)
    if check:
        bad = check_semantics(traces, built)
        if bad and bad[0].startswith("not checked"):
            traces[0].findings.append(Finding("semantics check", bad[0], None))
        elif bad:
            raise NkiValidationError("check_semantics: the program differs from the traced "
                                     "kernel: " + "; ".join(bad), None, traces[0].kernel_name)
    from ..timing.simulate import simulate as core_simulate, simulate_cores
    meetings = [_meetings(bp.program) for bp in built] if len(built) > 1 else ()
    if any(len(s) for s, _ in meetings):        # the cores meet: timed together
        return TimingResult(built, simulate_cores([bp.program for bp in built], meetings))
    return TimingResult(built, [core_simulate(bp.program) for bp in built])


def _meetings(program) -> tuple:
    """(signal rows, wait rows) of a core's program: the rows of the instructions that meet the
    other core (isa.meeting_instructions: two rows each, the signal first), in program order."""
    from ..isa import meeting_instructions
    ops = [k for k, n in enumerate(program.opnames) if n in meeting_instructions()]
    rows = np.flatnonzero(np.isin(program.cols["op"], ops)) if ops else np.zeros(0, np.int64)
    return rows[0::2], rows[1::2]


@dataclass
class TimingResult:
    built: list              # BuiltProgram per core
    timelines: list          # the timing model's result per core (None: no timing model)
