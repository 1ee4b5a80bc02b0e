"""`ProgramBuilder`: the one way the NKI front end and the op lowering write ISA programs.

`instruction(name, ...)` appends any NKI ISA instruction by its name, with its operands by
keyword: it checks legality on the builder's chip, asks the instruction module
(neuron_sim/isa/<engine>/<instr>.py) for its cost, and appends one row. The instructions the op
lowering writes also have methods of their own name (`b.tensor_tensor(dst, a, b, "add")`).
Dependencies are found automatically from the operands (read-after-write, write-after-read,
write-after-write on overlapping tensor regions, as the compiler's semaphores would enforce), and
can be added explicitly (`deps=[i, ...]`) or through semaphores (`signal=s`, `wait=[(s, count)]`).
Every method returns the index of the instruction it appended (nc_matmul returns the
MultiplyMoving's). Loops go through `repeat(count, body)`, which writes the iterations of an
affine loop in bulk (program/repeat.py) and gives the program the plain loop gives."""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from itertools import chain

import numpy as np

from ..engines import N_COMPUTE_STREAMS, Engine, stream_name
from ..errors import DeadlockError, PartitionError, ProgramError
from ..hardware import Chip, get_chip
from ..isa import build_params, instruction_names, module_for
from ..kernels.deps import _auto_deps
from ..memory.allocator import PartitionAllocator
from . import repeat as R
from .ap import Memory, Tensor, as_ap
from .program import COLUMNS, Program

_ENGINE_ARG = {"tensor": Engine.TENSOR, "pe": Engine.TENSOR, "vector": Engine.VECTOR,
               "dve": Engine.VECTOR, "scalar": Engine.SCALAR, "act": Engine.SCALAR,
               "activation": Engine.SCALAR, "gpsimd": Engine.GPSIMD, "pool": Engine.GPSIMD,
               "sync": Engine.SYNC, "sp": Engine.SYNC}


def engine_of(e) -> Engine:
    if isinstance(e, (int, Engine)):
        return Engine(e)
    key = str(e).lower().split(".")[-1]
    if key not in _ENGINE_ARG:
        raise ProgramError(f"unknown engine {e!r}; use one of {sorted(set(_ENGINE_ARG))}")
    return _ENGINE_ARG[key]


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _covers(a, b) -> bool:
    return a[0] <= b[0] and b[1] <= a[1] and a[2] <= b[2] and b[3] <= a[3]


_MODULES: dict = {}     # instruction name -> (ISA module, takes a queue, reuses the stationary)
_GC_LOCK = threading.Lock()
_GC_PAUSE = [0, False]          # holders of the pause, whether the collector ran before the first


def module_spec(name) -> tuple:
    """What instruction() needs of instruction `name`'s ISA module (_MODULES), looked up once."""
    spec = _MODULES.get(name)
    if spec is not None:
        return spec
    mod = module_for(name)
    if mod is None:
        raise ProgramError(f"unknown instruction {name!r}; known: "
                           f"{', '.join(instruction_names())}")
    spec = _MODULES[name] = (mod, "queue" in build_params(mod),
                             getattr(mod, "REUSES_STATIONARY", False))
    return spec


@contextmanager
def paused_gc():
    """Python's cyclic garbage collector paused while a program is traced or built: that
    allocates millions of small objects (views, access patterns, records, tuples) that live until
    the program is done, and every collection walks all of them again (30-45% of building an NKI
    kernel's program, measured). Nothing made here needs the collector to be freed. Nests, and
    is safe from several threads (the programs of an LNC=2 launch trace in two): the last holder
    to leave restores the collector."""
    with _GC_LOCK:
        if _GC_PAUSE[0] == 0:
            _GC_PAUSE[1] = gc.isenabled()
            gc.disable()
        _GC_PAUSE[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSE[0] -= 1
            if _GC_PAUSE[0] == 0 and _GC_PAUSE[1]:
                gc.enable()


def _scalar(x):
    """A scalar operand as the ISA modules take it: a number (or None), or a tile's pattern."""
    return x if x is None or isinstance(x, (int, float)) else as_ap(x)


def _csr(rows) -> tuple:
    """(ptr, idx): the lists of indices `rows` as a CSR."""
    ptr = np.zeros(len(rows) + 1, np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    return ptr, np.fromiter(chain.from_iterable(rows), np.int64, count=int(ptr[-1]))


def _reference_default() -> bool:
    from .. import config
    return config.get("NEURON_SIM_REFERENCE")


class ProgramBuilder:
    """`reference=True` (default: setting NEURON_SIM_REFERENCE) finds each instruction's automatic
    dependencies as it is appended (`_auto`, the readable specification); otherwise append only
    records the operands' boxes and build() finds all of them in one pass
    (neuron_sim/kernels/deps.py), with the same result."""

    def __init__(self, chip: Chip | str | None = None, *, name: str = "program",
                 check_capacity: bool = True, keep_operands: bool = True,
                 reference: bool | None = None):
        self.chip = get_chip(chip)
        self.name = name
        self.check_capacity = check_capacity
        self.keep_operands = keep_operands
        self.reference = bool(_reference_default() if reference is None else reference)
        # Rows not yet flushed to segments (all of them in reference mode):
        self._rids: list[int] = []             # per instruction: its row in _table
        self._deps: list[list[int]] = []       # explicit deps (automatic too in reference mode)
        self._ord: dict[int, list[int]] = {}   # row -> same-stream WAR/WAW predecessors
        self._acc: list[tuple] = []            # bulk mode: (track, write, p0, p1, f0, f1, pst, off)
        self._acc_ptr: list[int] = [0]         # bulk mode: CSR of _acc over instructions
        self._cls: list[int] = []              # inside repeat(): class of each row (repeat.py)
        self._cuts: list[int] = []             # repeat(): ends of the sampled iterations' rows
        # Bulk mode: rows flushed to NumPy segments (repeat.Segments), by repeat()
        self._segs = R.Segments()
        self._flushed = 0                      # instructions in _segs
        self._pool: list = []                  # operand records of flushed rows (keep_operands)
        self._classes: dict = {}               # emit_key -> (class id, row id)
        self._depth = 0                        # repeat() nesting
        self._precedents: dict = {}            # (body code, count) -> [repeat.Precedent]
        self._mut = 0                          # allocations, frees, semaphore uses (repeat())
        self._track_ids: dict[int, int] = {}   # tensor id -> dense track number
        self._track_tid: list[int] = []        # dense track number -> tensor id
        self._track_tensor: list = []          # dense track number -> Tensor (None: id only)
        self._versions: dict[int, int] = {}    # tensor id -> writes so far (stationary reuse)
        self._emits: list = []
        self._opnames: list[str] = []
        self._opindex: dict[str, int] = {}
        self._tensors: list[Tensor] = []
        self._live: dict[int, tuple] = {}      # reference mode: tensor id -> (writes, reads)
        self._signals: dict[int, list[int]] = {}
        self._waits: list[tuple[int, int, int]] = []   # (instr, sem, count)
        self._last_stationary = None
        self._next_queue = 0
        self._clocks: dict[int, float] = {}
        self._row_memo: dict[tuple, int] = {}  # compute row id by what it is made of (_append)
        # Distinct rows (tuples of COLUMNS values); an instruction is its row id: a repeated row
        # is kept once and the bulk path copies 8 bytes per row, not len(COLUMNS) * 8
        self._table: list[tuple] = []
        self._spill_slots: set[int] = set()
        self._spill_bytes = 0.0
        c = self.chip
        self._sbuf = PartitionAllocator("SBUF", c.sbuf_usable_bytes_per_partition, c.name)
        self._psum = PartitionAllocator("PSUM", c.psum_bytes_per_partition, c.name,
                                        bank_bytes=c.psum_bank_bytes_per_partition)

    def __del__(self):
        # the columns of the rows written go to the next builder (repeat.Segments.recycle),
        # once what still sees them is gone: the loops kept as precedents. (A builder whose
        # __init__ failed has no columns.)
        segs = self.__dict__.get("_segs")
        if segs is not None:
            self._precedents = None
            segs.recycle()

    # ---- tensors --------------------------------------------------------------------------
    def hbm(self, name: str, shape, dtype) -> Tensor:
        t = Tensor(name, Memory.HBM, shape, dtype)
        self._mut += 1
        self._tensors.append(t)
        return t

    def sbuf(self, name: str, shape, dtype, *, partition_start: int = 0) -> Tensor:
        return self._alloc(name, Memory.SBUF, shape, dtype, partition_start, self._sbuf)

    def psum(self, name: str, shape, dtype="float32", *, partition_start: int = 0) -> Tensor:
        return self._alloc(name, Memory.PSUM, shape, dtype, partition_start, self._psum)

    def _alloc(self, name, memory, shape, dtype, p0, allocator) -> Tensor:
        t = Tensor(name, memory, shape, dtype, 0, p0)
        parts = self.chip.sbuf_partitions
        if t.partitions > parts or t.partitions + p0 > parts:
            raise PartitionError(f"{memory.name.lower()} allocation", name,
                                 f"<= {self.chip.sbuf_partitions} partitions",
                                 f"{t.partitions} from partition {p0}", self.chip.name,
                                 "put the largest dimension on the free axis or split the tensor")
        if self.check_capacity:
            t.byte_offset = allocator.alloc(t.bytes_per_partition, name)
        self._mut += 1
        self._tensors.append(t)
        return t

    def free(self, *tensors: Tensor) -> None:
        """Release SBUF/PSUM tiles; a later tile may reuse the bytes (WAR deps keep it ordered)."""
        self._mut += 1
        for t in tensors:
            if t.memory != Memory.HBM and self.check_capacity and not t.freed:
                (self._sbuf if t.memory == Memory.SBUF else self._psum).free(t.byte_offset)
            t.freed = True

    @property
    def sbuf_peak_bytes_per_partition(self) -> int:
        return self._sbuf.peak

    @property
    def psum_peak_bytes_per_partition(self) -> int:
        return self._psum.peak

    @property
    def sbuf_free_bytes_per_partition(self) -> int:
        """Usable SBUF bytes per partition not held by a live tile (what a program can still
        allocate before it has to spill)."""
        return self._sbuf.capacity - self._sbuf.used

    @property
    def spill_bytes(self) -> float:
        """DMA bytes of spill_store and spill_reload instructions so far."""
        return self._spill_bytes

    # ---- the append path ------------------------------------------------------------------
    def __len__(self) -> int:
        return self._flushed + len(self._deps)

    def append(self, emit, *, deps=(), wait=(), signal=None) -> int:
        """Append one instruction record (an isa.common.Emit). Public for front ends that make
        their own records; ordinary users call instruction() or the named methods."""
        return self._append(emit, deps, wait, signal)

    def _append(self, emit, deps, wait, signal) -> int:
        i = self._flushed + len(self._deps)
        m = emit.dma
        d = set(map(int, deps)) if deps else None
        if d and (min(d) < 0 or max(d) >= i):
            for x in d:
                if not 0 <= x < i:
                    raise ProgramError(f"{emit.name}: dependency {x} is not an earlier instruction")
        versions = self._versions
        for ap in emit.writes:
            tid = ap.tensor.id
            versions[tid] = versions.get(tid, 0) + 1
        if self.reference:
            if d is None:
                d = set()
            o = self._auto(i, emit, d)
            if o:
                self._ord[i] = sorted(o - d)
        else:       # bulk mode: keep the operands' boxes (reads, then writes) for build()
            # (a loop per side, not one over both: this runs for every instruction)
            acc, tracks = self._acc, self._track_ids
            for ap in emit.reads:
                t = tracks.get(ap.tensor.id)
                if t is None:
                    t = self._new_track(ap.tensor.id, ap.tensor)
                acc.append((t, 0) + (ap._rec or ap.record()))
            for ap in emit.writes:
                t = tracks.get(ap.tensor.id)
                if t is None:
                    t = self._new_track(ap.tensor.id, ap.tensor)
                acc.append((t, 1) + (ap._rec or ap.record()))
            self._acc_ptr.append(len(acc))
        if wait:
            for sem, count in wait:
                self._waits.append((i, int(sem), int(count)))
                self._mut += 1
        if signal is not None:
            self._signals.setdefault(int(signal), []).append(i)
            self._mut += 1
        if self._depth:
            # inside repeat(): the row is a function of the record's class, so one lookup gives
            # both (a DMA row is not recomputed either)
            c, rid = self._class_row(emit)
            self._cls.append(c if self.keep_operands else 0)
        elif m is None:
            # a compute row is a function of these (a kernel repeats a few of them thousands
            # of times): looked up, not recomputed
            key = (emit.name, emit.engine, emit.kind, emit.ii_cycles, emit.lat_cycles, emit.flops)
            rid = self._row_memo.get(key)
            if rid is None:
                rid = self._row_memo[key] = self._new_row(emit)
        else:
            rid = self._new_row(emit)
        self._rids.append(rid)
        self._deps.append(sorted(d) if d else [])
        self._emits.append(emit if self.keep_operands else None)
        return i

    def append_rows(self, records, rec, x_ptr, x_idx, acc_ptr, tensor, write, box, pst, off,
                    emits=None) -> int:
        """Append n rows a front end made in bulk (neuron_sim/nki/program.py): the program is
        the one append() called row by row builds. `records`: Emits the rows' columns come from
        (row i's are those of records[rec[i]]); x_ptr/x_idx: explicit dependencies (CSR over the
        n rows, sorted and unique per row, earlier instructions' global indices);
        acc_ptr/tensor/write/box/pst/off: each row's operand accesses, reads then writes, as
        append() records them (tensor id, 0/1, AccessPattern.record()); emits: the n rows'
        records (kept when keep_operands). No semaphores and no stationary reuse (the caller
        decides which rows there are); the tensors' write counts advance. Bulk mode only.
        Returns the index of the first row."""
        if self.reference or self._depth:
            raise ProgramError("append_rows: only in bulk mode (not in reference mode, not inside "
                               "repeat()); append the rows one by one instead")
        n, first = len(rec), len(self)
        rows_of = np.repeat(np.arange(first, first + n), np.diff(x_ptr))
        if x_idx.size and (x_idx.min() < 0 or (x_idx >= rows_of).any()):
            raise ProgramError("append_rows: a dependency is not an earlier instruction")
        self._flush()
        ids, at, inv = np.unique(tensor, return_index=True, return_inverse=True)
        tracks = self._track_ids
        for t in ids[np.argsort(at)].tolist():      # new tracks in order of first access
            if t not in tracks:
                self._new_track(t)
        track = np.array([tracks[t] for t in ids.tolist()], np.int64)[inv]
        for t, k in zip(ids.tolist(), np.bincount(inv[write == 1], minlength=len(ids)).tolist()):
            if k:
                self._versions[t] = self._versions.get(t, 0) + k
        if self.keep_operands:
            base = np.arange(len(self._pool), len(self._pool) + n, dtype=np.int64)
            self._pool.extend(emits)
        else:
            base = np.full(n, -1, np.int64)
        rid = len(self._table) + np.asarray(rec, np.int64)
        self._table.extend([self._row(e) for e in records])
        self._segs.append(R.Seg(rid, x_ptr, x_idx, acc_ptr, track, write, box, pst, off, base,
                                np.full(n, -1, np.int64)))
        self._flushed += n
        return first

    def _new_row(self, emit) -> int:
        self._table.append(self._row(emit))
        return len(self._table) - 1

    def _row(self, emit) -> tuple:
        """The instruction's values in the order of COLUMNS (its stream: the engine's, or
        its DMA queue's)."""
        op = self._opindex.get(emit.name)
        if op is None:
            op = self._opindex[emit.name] = len(self._opnames)
            self._opnames.append(emit.name)
        clock = self._clocks.get(emit.engine)
        if clock is None:
            clock = self._clocks[emit.engine] = (self.chip.clock_hz(emit.engine)
                                                 if emit.engine != Engine.DMA else 1e9)
        m = emit.dma
        if m is None:
            return (op, emit.engine, emit.engine, emit.kind, emit.ii_cycles * 1e9 / clock,
                    emit.lat_cycles * 1e9 / clock, emit.flops, 0.0, 0.0, 0.0, 0.0, 0, 0, -1)
        return (op, emit.engine, N_COMPUTE_STREAMS + m.queue, emit.kind,
                emit.ii_cycles * 1e9 / clock, emit.lat_cycles * 1e9 / clock, emit.flops, m.bytes,
                m.engine_ns, m.hbm_ns, m.issue_ns, m.engines, m.engine0, m.direction)

    def _class_row(self, emit) -> tuple:
        """(class, row id) of a record appended inside repeat(): its class numbers its
        repeat.emit_key, which holds everything the row is made of."""
        key = R.emit_key(emit)
        try:
            hit = self._classes.get(key)
        except TypeError:                        # a parameter is not hashable: never equal to
            return -2, self._new_row(emit)       # anything, not repeated in bulk
        if hit is None:
            hit = self._classes[key] = (len(self._classes), self._new_row(emit))
        return hit

    def _new_track(self, tid, tensor=None) -> int:
        t = self._track_ids[tid] = len(self._track_ids)
        self._track_tid.append(tid)
        self._track_tensor.append(tensor)
        return t

    def _auto(self, i, emit, d):
        """The specification of kernels/deps.py: each operand's box against every live (box,
        instr) access of its tensor (`_live`): a read depends on the writes it overlaps; a write
        on the reads and writes it overlaps, and hides those it covers. Returns the same-stream
        WAR/WAW pairs: implicit in program order, kept for the scheduler."""
        o = set()
        stream = emit.engine if emit.dma is None else N_COMPUTE_STREAMS + emit.dma.queue
        for ap in emit.reads:
            writes, reads = self._live.setdefault(ap.tensor.id, ([], []))
            box = ap.box()
            d.update(j for b, j in writes if _overlap(box, b))
            reads.append((box, i))
        for ap in emit.writes:
            writes, reads = self._live.setdefault(ap.tensor.id, ([], []))
            box = ap.box()
            for live in (writes, reads):
                for b, j in live:
                    if j != i and _overlap(box, b):
                        (d if self._table[self._rids[j]][2] != stream else o).add(j)
                live[:] = [e for e in live if not _covers(box, e[0])]
            writes.append((box, i))
        return o

    def _flush(self) -> None:
        """Bulk mode: move the rows appended since the last flush into a NumPy segment (one per
        piece between _cuts: what flushing at each cut would have made)."""
        n = len(self._rids)
        if not n:
            return
        # (a loop's sampled iterations flush one by one: a few rows each, so the NumPy calls
        # per flush are what it costs: the lists go straight into the segments' columns)
        S, deps = self._segs, self._deps
        x_len = [len(x) for x in deps] if any(deps) else None
        nx, na = (sum(x_len) if x_len else 0), len(self._acc)
        r, x, a = S.reserve(n, nx, na)
        rows = slice(r, r + n)
        S.rid[rows] = self._rids
        if x_len:
            np.add(np.cumsum(x_len), x, out=S.x_ptr[r + 1:r + n + 1])
            # fromiter over the chained lists: NumPy converts a flat stream ~2x faster
            S.x_idx[x:x + nx] = np.fromiter(chain.from_iterable(deps), np.int64, count=nx)
        else:
            S.x_ptr[r + 1:r + n + 1] = x
        if na:
            acc = np.fromiter(chain.from_iterable(self._acc), np.int64,
                              count=8 * na).reshape(na, 8)   # track, write, box, p_start, offset
            accs = slice(a, a + na)
            S.track[accs], S.write[accs], S.box[accs] = acc[:, 0], acc[:, 1], acc[:, 2:6]
            S.pst[accs], S.off[accs] = acc[:, 6], acc[:, 7]
            np.add(self._acc_ptr[1:], a, out=S.acc_ptr[r + 1:r + n + 1])
        else:
            S.acc_ptr[r + 1:r + n + 1] = a
        if self.keep_operands:
            S.base[rows] = np.arange(len(self._pool), len(self._pool) + n, dtype=np.int64)
            self._pool.extend(self._emits)
        else:
            S.base[rows] = -1
        k = len(self._cls)                      # rows after a loop, outside it: no class
        if k < n:
            S.cls[r + k:r + n] = -1
        if k:
            S.cls[r:r + k] = self._cls
        S.advance(n, nx, na, False, self._cuts)
        self._flushed += n
        self._rids, self._deps, self._emits, self._cls, self._cuts = [], [], [], [], []
        self._acc, self._acc_ptr = [], [0]

    def _bulk_deps(self, seg, stream):
        """(dep_ptr, dep_idx, ord_ptr, ord_idx) of the explicit and automatic dependencies."""
        return _auto_deps(seg.n, stream.astype(np.int64), seg.acc_ptr, seg.track, seg.write,
                          np.ascontiguousarray(seg.box), len(self._track_ids), seg.x_ptr,
                          seg.x_idx)

    def build(self) -> Program:
        if self.reference:
            rid, n = np.array(self._rids, np.int64), len(self._deps)
            emits = self._emits if self.keep_operands else None
        else:
            self._flush()
            seg = self._segs[:]
            rid, n = seg.rid, seg.n
            emits = None
            if self.keep_operands:
                emits = (R.LazyEmits(self._pool, seg.base, seg.acc_ptr, seg.pst, seg.off,
                                     seg.track, self._track_tensor)
                         if self._segs.synthetic else self._pool)
        # each column of the distinct rows, gathered
        table = np.array(self._table, np.float64).reshape(-1, len(COLUMNS))
        cols = {k: table[:, j].astype(dt)[rid] for j, (k, dt) in enumerate(COLUMNS.items())}
        if self.reference:
            deps = [list(x) for x in self._deps]
            optr, oidx = _csr([self._ord.get(i, ()) for i in range(n)])
        else:
            ptr, idx, optr, oidx = self._bulk_deps(seg, cols["stream"])
            deps = None
            if self._waits:
                deps = [idx[ptr[i]:ptr[i + 1]].tolist() for i in range(n)]
        for i, sem, count in self._waits:
            sig = self._signals.get(sem, [])
            if count > len(sig):
                eng = stream_name(int(cols["stream"][i]))
                sig_eng = sorted({stream_name(int(cols["stream"][s])) for s in sig})
                e = emits[i] if emits is not None else None
                raise DeadlockError(
                    [eng] + sig_eng,
                    f"instruction {i} ({e.name if e else '?'}) on {eng} "
                    f"waits for semaphore {sem} >= {count}, but the program signals it only "
                    f"{len(sig)} time(s)" + (f" (from {', '.join(sig_eng)})" if sig_eng else ""))
            deps[i].extend(s for s in sig[:count] if s != i)
        if deps is not None:
            ptr, idx = _csr([sorted(set(x)) for x in deps])
        p = Program(self.chip, cols, ptr, idx, list(self._opnames),
                    list(emits) if isinstance(emits, list) else emits, list(self._tensors),
                    self.name, optr, oidx)
        p.validate()
        return p

    # ---- loops ------------------------------------------------------------------------------
    def repeat(self, count: int, body, *, start: int = 0) -> range:
        """Append `count` iterations of a loop: `body(i)` appends the instructions of iteration i
        (i = start .. start+count-1) through the ordinary methods, as
        `for i in range(start, start + count): body(i)` would, and the program is exactly the
        one that loop builds (columns, dependencies, order edges, operands). Returns the range
        of instruction indices appended.

        The builder may run `body` for only a few leading iterations and write the rest in bulk
        (NumPy) when those iterations are affine: after iteration 0 (free to differ: first
        loads, `accumulate=i > 0`), every iteration (or every group of p iterations, for tiles
        taken round-robin from a pool of p buffers) appends the same instructions with the same
        costs, on the same tensors, each operand's partition start and element offset moving by
        a constant step, explicit deps pointing before the loop or the same distance back. When
        they are not, it simply runs body(i) for every i. Nested loops nest: a body may call
        repeat() itself.

        So `body(i)` must be a function of i alone: it must not carry Python state from one
        iteration to the next (a round-robin counter advanced in the body, a list appended to),
        since iterations written in bulk never run. Take `tiles[(base + i) % bufs]` instead of
        `pool.next()`. Allocating or freeing tiles and semaphore waits/signals inside the body
        are allowed; the builder then runs every iteration. The builder's own state (DMA queue
        round-robin, stationary reuse, spill bytes) ends as the loop would leave it. In
        reference mode (NEURON_SIM_REFERENCE=1) every iteration runs."""
        count = int(count)
        if count < 0:
            raise ProgramError(f"repeat: count must be >= 0, got {count}")
        first_row, start = len(self), int(start)
        if self.reference or count < 4:
            for i in range(count):
                body(start + i)
            return range(first_row, len(self))
        # the loop's rows start a segment. Flushed at the outermost loop (rows before it have no
        # class, _flush puts those after the classed ones); inside one, flushed with the outer
        # iteration's rows when they are compared
        if self._depth:
            self._cut()
        else:
            self._flush()
        self._depth += 1
        try:
            k = self._sample_then_synthesize(count, body, start)
            for i in range(k, count):       # not affine: the plain loop
                body(start + i)
            if self._depth > 1:
                self._cut()                 # an outer repeat() compares whole iterations
        finally:
            self._depth -= 1
        return range(first_row, len(self))

    def _cut(self) -> None:
        """End a segment at the rows appended so far (at the next _flush)."""
        n = len(self._rids)
        if n and (not self._cuts or self._cuts[-1] < n):
            self._cuts.append(n)

    def _snapshot(self) -> R.Snapshot:
        st = self._last_stationary
        cuts = self._cuts
        # segments once flushed: those written, the pieces pending
        segs = len(self._segs) + len(cuts) + (len(self._rids) > (cuts[-1] if cuts else 0))
        return R.Snapshot(segs, self._mut, self._next_queue, self._spill_bytes, st,
                          -1 if st is None else self._versions.get(st[0].tensor.id, 0))

    def _sample_then_synthesize(self, count, body, start) -> int:
        """Run iterations until they are seen to be affine, then write the rest in bulk
        (repeat.py). Returns the first iteration still to run (count when all are written).
        A loop whose body (same code) and count were written in bulk before, e.g. the inner
        loop of a nest in the next outer iteration, is written after its first affine two
        iterations if they match that precedent shifted, on the same tensors or on others in
        their place (repeat.from_precedent)."""
        key = (getattr(body, "__code__", None), count)
        precedents = self._precedents.get(key, ()) if key[0] is not None else ()
        snaps = [self._snapshot()]               # snaps[k + 1]: after iteration k
        its = []                                 # its[k]: iteration k as a repeat.Sample
        for k in range(count):
            body(start + k)
            # each iteration its own segment, flushed when the iterations are compared (one
            # flush for those since the last comparison: a flush costs ~20 us however few rows)
            self._cut()
            snaps.append(self._snapshot())
            if k == count - 1:
                return count
            ready = [pre for pre in precedents if pre.window + 1 == k]
            if k < 2 and not ready:
                continue
            self._flush()
            for j in range(len(its), k + 1):
                its.append(R.Sample(self._segs[snaps[j].segs:snaps[j + 1].segs]))
            for pre in ready:
                t = R.from_precedent(pre, its, snaps, self._track_ids, self._track_tensor)
                if t is not None:
                    self._write_bulk(t, k + 1, count)
                    return count
            if k < 2:
                continue
            if not its[k].same(its[k - 1]) or not its[k].repeatable():
                return k + 1                     # iterations 1.. differ: the plain loop
            first = 0 if its[0].same(its[1]) else 1   # iteration 0 may differ (first loads)
            t = R.find_template(its[first:], snaps[first + 1:], snaps[first], first)
            if t is not None:
                self._write_bulk(t, k + 1, count)
                if key[0] is not None:
                    kept = self._precedents.setdefault(key, [])
                    kept.insert(0, R.Precedent(t, first, its[:first + 2], snaps[:first + 3]))
                    del kept[8:]
                return count
            if k > R.PERIOD_MAX + 1:
                return k + 1
        return count

    def _write_bulk(self, t, start, stop) -> None:
        self._flushed += R.synthesize(t, start, stop, self._segs)
        for track, k in R.write_counts(t, start, stop).items():
            tid = self._track_tid[track]
            self._versions[tid] = self._versions.get(tid, 0) + k
        self._spill_bytes, key = R.state_after(t, stop - 1)
        if key is not None and key[1] == -1:
            key = (key[0], self._versions.get(key[0].tensor.id, 0))
        self._last_stationary = key

    # ---- helpers shared by the instruction methods ----------------------------------------
    def _queue(self, queue):
        if queue is None:
            q = self._next_queue
            self._next_queue = (q + 1) % self.chip.dma_queues_per_engine
            return q
        return int(queue)

    # ---- any instruction, by its name in the ISA registry -------------------------------------
    def instruction(self, name: str, *, deps=(), wait=(), signal=None, **args) -> int:
        """Append instruction `name` with its operands by keyword, as its module's `build`
        (neuron_sim/isa/<engine>/<name>.py) names them; `deps`, `wait`, `signal` as everywhere.
        Returns the index of its last row. The named methods below are the same, spelled out."""
        return self.append_built(name, self.build_instruction(name, **args), deps, wait, signal)

    def build_instruction(self, name: str, **args):
        """instruction()'s first half: the record(s) its module's `build` makes of these operands
        (checked and costed), not appended yet. A front end that meets one instruction geometry
        many times can build it once and hand copies to append_built (neuron_sim/nki/program.py)."""
        mod, takes_queue, _ = module_spec(name)
        for k, v in args.items():
            if isinstance(v, Tensor):
                args[k] = v.ap()
        if "engine" in args:
            args["engine"] = engine_of(args["engine"])
        if takes_queue and args.get("queue") is None:
            args["queue"] = self._queue(None)
        return mod.build(self.chip, **args)

    def append_built(self, name: str, out, deps=(), wait=(), signal=None) -> int:
        """instruction()'s second half: append `out`, what build_instruction(name, ...) gave.
        Returns the index of its last row."""
        if not isinstance(out, (tuple, list)):
            return self._append(out, deps, wait, signal)
        # a TensorE pass: LoadStationary row(s), then the array pass. nc_matmul skips a
        # LoadStationary whose operand is still loaded; anything else on TensorE replaces it.
        reuse = _MODULES[name][2]
        pre, last = out[:-1], out[-1]
        for em in pre:
            if reuse:
                ap = em.reads[0]
                key = (ap, self._versions.get(ap.tensor.id, 0))     # the operand, its writes so far
                if key == self._last_stationary:
                    continue
                self._last_stationary = key
            self._append(em, (), wait, None)
        if not reuse and last.engine == Engine.TENSOR:
            self._last_stationary = None
        return self._append(last, deps, () if pre else wait, signal)

    # ---- TensorE ----------------------------------------------------------------------------
    def nc_matmul(self, dst, stationary, moving, *, accumulate: bool = False,
                  perf_mode: str | None = None, is_transpose: bool = False, **kw) -> int:
        """dst[M, N] (PSUM) (+)= stationary[K, M].T @ moving[K, N]. `accumulate=False` starts a
        PSUM accumulation group (overwrites); True adds in FP32. Emits LoadStationary (skipped
        when the same stationary is still loaded) and MultiplyMoving."""
        return self.instruction("nc_matmul", dst=dst, stationary=stationary, moving=moving,
                                accumulate=accumulate, perf_mode=perf_mode,
                                is_transpose=is_transpose, **kw)

    def nc_transpose(self, dst, src, *, engine="tensor", **kw) -> int:
        """Transpose src[P, F] to dst[F, P]: on TensorE (matmul against identity, PSUM out) or on
        VectorE (32x32 blocks)."""
        return self.instruction("nc_transpose", dst=dst, data=src, engine=engine, **kw)

    # ---- VectorE ----------------------------------------------------------------------------
    def tensor_tensor(self, dst, data1, data2, op="add", *, engine="vector", **kw) -> int:
        return self.append(module_for("tensor_tensor").build(
            self.chip, as_ap(dst), as_ap(data1), as_ap(data2), op, engine_of(engine)), **kw)

    def tensor_scalar(self, dst, data, op0="multiply", operand0=1.0, op1=None, operand1=None, *,
                      reverse0=False, engine="vector", **kw) -> int:
        """dst = (data <op0> operand0) <op1> operand1; reverse0: operand0 <op0> data."""
        return self.append(module_for("tensor_scalar").build(
            self.chip, as_ap(dst), as_ap(data), op0, _scalar(operand0), reverse0, op1=op1,
            operand1=_scalar(operand1), engine=engine_of(engine)), **kw)

    def tensor_reduce(self, dst, data, op="add", *, negate=False, engine="vector", **kw) -> int:
        return self.append(module_for("tensor_reduce").build(
            self.chip, as_ap(dst), op, as_ap(data), negate=negate, engine=engine_of(engine)), **kw)

    def tensor_copy(self, dst, src, *, engine="vector", **kw) -> int:
        return self.append(module_for("tensor_copy").build(self.chip, as_ap(dst), as_ap(src),
                                                           engine_of(engine)), **kw)

    def memset(self, dst, value=0.0, *, engine="vector", **kw) -> int:
        return self.append(module_for("memset").build(self.chip, as_ap(dst), value,
                                                      engine_of(engine)), **kw)

    def bn_stats(self, dst, data, **kw) -> int:
        return self.append(module_for("bn_stats").build(self.chip, as_ap(dst), as_ap(data)), **kw)

    def bn_aggr(self, dst, data, **kw) -> int:
        return self.append(module_for("bn_aggr").build(self.chip, as_ap(dst), as_ap(data)), **kw)

    def tensor_tensor_scan(self, dst, data0, data1, initial=0.0, op0="multiply", op1="add",
                           **kw) -> int:
        return self.append(module_for("tensor_tensor_scan").build(
            self.chip, as_ap(dst), as_ap(data0), as_ap(data1), initial, op0, op1), **kw)

    # ---- ScalarE ----------------------------------------------------------------------------
    def activation(self, dst, data, op="copy", *, bias=None, scale=1.0, reduce_res=None,
                   reduce_op="add", **kw) -> int:
        """dst = op(data * scale + bias); with reduce_res, also reduce along the free axis
        (activation_reduce)."""
        return self.append(module_for("activation").build(
            self.chip, as_ap(dst), op, as_ap(data), _scalar(bias), _scalar(scale), reduce_op,
            None if reduce_res is None else as_ap(reduce_res),
            "idle" if reduce_res is None else "reset_reduce"), **kw)

    # ---- GpSimd -----------------------------------------------------------------------------
    def iota(self, dst, *, base=0, channel_multiplier=0, pattern=((1, None),), **kw) -> int:
        """dst[p, f...] = base + channel_multiplier * p + sum(step_d * i_d)."""
        return self.append(module_for("iota").build(self.chip, as_ap(dst), pattern, offset=base,
                                                    channel_multiplier=channel_multiplier), **kw)

    def affine_select(self, dst, on_true, on_false_value, *, channel_multiplier=1,
                      pattern=((-1, None),), offset=0, cmp_op="greater_equal", **kw) -> int:
        return self.append(module_for("affine_select").build(
            self.chip, as_ap(dst), pattern, channel_multiplier, as_ap(on_true), on_false_value,
            cmp_op, offset), **kw)

    # ---- DMA --------------------------------------------------------------------------------
    def dma_copy(self, dst, src, *, queue=None, engines=None, dge="none", index=None,
                 dst_rmw_op=None, oob_mode="error", **kw) -> int:
        """Copy between HBM and SBUF (either way), SBUF->SBUF or HBM->HBM, casting through FP32
        when dtypes differ. `engines`: how many of the 16 DMA engines share it (default: one per
        partition up to 16); `dge`: 'none' (static descriptors), 'swdge', 'hwdge'. `index`
        (an SBUF index tile, with an IndirectPattern side), `dst_rmw_op` ('add') and
        `oob_mode`: a gather, scatter or scatter-add (isa/dma/dma_copy.py)."""
        return self.append(module_for("dma_copy").build(
            self.chip, as_ap(dst), as_ap(src), self._queue(queue), engines, dge, oob_mode,
            index=None if index is None else as_ap(index), dst_rmw_op=dst_rmw_op), **kw)

    def dma_transpose(self, dst, src, *, queue=None, engines=None, dge="none", **kw) -> int:
        return self.append(module_for("dma_transpose").build(
            self.chip, as_ap(dst), as_ap(src), self._queue(queue), engines, dge), **kw)

    # ---- spills: SBUF data the program keeps in HBM because it does not fit ----------------
    def spill_slot(self, name: str, shape, dtype) -> Tensor:
        """An HBM scratch tensor that holds SBUF data while it is spilled (named '<name>.spill',
        as the NKI front end names its spill scratch)."""
        t = self.hbm(f"{name}.spill", shape, dtype)
        self._spill_slots.add(t.id)
        return t

    def spill_store(self, slot, src, *, queue=None, engines=None, **kw) -> int:
        """Write SBUF `src` to its spill slot in HBM: a dma_copy SBUF->HBM (same cost, same
        semantics) marked `spill="store"`, so summaries count its bytes as spill traffic."""
        return self._spill("store", as_ap(slot), as_ap(src), queue, engines, kw)

    def spill_reload(self, dst, slot, *, queue=None, engines=None, **kw) -> int:
        """Read a spilled tile back from its HBM slot into SBUF `dst` before its next use: a
        dma_copy HBM->SBUF marked `spill="reload"`."""
        return self._spill("reload", as_ap(dst), as_ap(slot), queue, engines, kw)

    def spill_refetch(self, dst, src, *, queue=None, engines=None, **kw) -> int:
        """Reload a spilled SBUF tile that was a plain copy of HBM data from that data (nothing
        was stored): a dma_copy HBM->SBUF marked `spill="reload"`."""
        return self._spill("reload", as_ap(dst), as_ap(src), queue, engines, kw, slot=False)

    def _spill(self, when, dst, src, queue, engines, kw, slot=True) -> int:
        hbm_side, sbuf_side = (dst, src) if when == "store" else (src, dst)
        wrong_hbm_side = (hbm_side.tensor.id not in self._spill_slots if slot
                          else hbm_side.memory != Memory.HBM)
        if wrong_hbm_side or sbuf_side.memory != Memory.SBUF:
            what = "a slot made by spill_slot()" if slot else "HBM data"
            raise ProgramError(
                f"spill_{when}: expected an SBUF tile and {what}, found "
                f"{sbuf_side.memory.name} {sbuf_side.tensor.name!r} and {hbm_side.memory.name} "
                f"{hbm_side.tensor.name!r}; use dma_copy for ordinary transfers")
        emit = module_for("dma_copy").build(self.chip, dst, src, self._queue(queue), engines,
                                            "none")
        emit.params["spill"] = when
        self._spill_bytes += emit.dma.bytes
        return self.append(emit, **kw)

    # ---- control ----------------------------------------------------------------------------
    def nop(self, engine="sync", **kw) -> int:
        """A zero-cost marker on an engine's queue (carries semaphore waits/signals)."""
        from ..isa.common import make
        return self.append(make("nop", engine_of(engine), 0, 0, (), ()), **kw)


__all__ = ["ProgramBuilder", "engine_of", "paused_gc"]
