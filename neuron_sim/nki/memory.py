"""On-chip allocation of a traced kernel: liveness, addresses, capacity, overlaps and spills.

NKI kernels allocate SBUF/PSUM tensors with ``nl.ndarray``; the compiler gives each an address
for the span of instructions that use it ("auto allocation"), reusing memory once a tensor is
dead. We do the same after tracing:

- A tensor is live from the first to the last instruction that touches it.
- Addresses go to the bytes freed longest ago, so a freed buffer is reused as late as possible:
  consecutive loop iterations land in different buffers (as many per allocation site as memory
  holds) and can overlap on different engines, as with the compiler's multi-buffering; when
  memory is tight they collide and the timing model serialises them through the
  write-after-read dependency.
- PSUM tensors take whole 2 KiB banks (an accumulation group lives in one bank [ArchV2]).
- SBUF that does not fit is spilled as the compiler does [MMtut]: the live tensor whose next use
  is furthest away is written to HBM and reloaded before that use. The spill and reload DMAs
  are inserted into the instruction stream, so their traffic is timed. A tile that is a plain
  copy of HBM data nobody writes (a kernel input loaded once) is not stored: it is fetched again
  from that data, as any compiler rematerialises a clean value (an assumption: the Neuron
  compiler's spill choices are not published).
- PSUM cannot spill: too many live PSUM tensors is an error naming the instruction and line.
- Tensors placed explicitly (``address=``) must not overlap other live explicit tensors.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from functools import cached_property

from .errors import NkiCapacityError, NkiOverlapError
from .tracer import Instr, KernelTrace

@dataclass
class Segment:
    start: int          # first instruction index (in the original stream) this address holds
    end: int            # last instruction index
    partition: int
    addr: int           # byte offset inside each partition
    size: int           # bytes per partition reserved


@dataclass
class MemoryPlan:
    segments: dict = field(default_factory=dict)          # storage id -> [Segment]
    spills: list = field(default_factory=list)            # (before_index, Instr)
    spill_bytes: int = 0
    peak_bytes_per_partition: dict = field(default_factory=lambda: {"sbuf": 0, "psum": 0})

    def address(self, storage, index) -> tuple[int, int]:
        segs = self.segments.get(storage.id)
        if not segs:
            return 0, 0
        for s in segs:
            if s.start <= index <= s.end:
                return s.partition, s.addr
        return segs[-1].partition, segs[-1].addr


class _LruAllocator:
    """Free bytes as segments stamped with the instruction index that freed them. A new tensor
    goes where the bytes were freed longest ago, never-used bytes first (why: the module's
    docstring)."""

    def __init__(self, capacity, align):
        self.capacity, self.align = capacity, align
        self.free = [(0, capacity, -1)]     # sorted, disjoint (start, end, freed_at)
        self.used = 0

    def _round(self, n):
        return -(-n // self.align) * self.align

    def alloc(self, size):
        size = self._round(max(size, 1))
        fr = self.free
        best = None
        n = len(fr)
        for i in range(n):
            s0 = fr[i][0]
            if best is not None and fr[i][2] >= best[0]:
                continue            # cannot beat the best window: it starts with a newer stamp
            stamp, end, j = fr[i][2], fr[i][1], i
            while end - s0 < size and j + 1 < n and fr[j + 1][0] == end:
                j += 1
                end = fr[j][1]
                stamp = max(stamp, fr[j][2])
            if end - s0 >= size and (best is None or stamp < best[0]):
                best = (stamp, s0)
        if best is None:
            return None
        a = best[1]
        self._take(a, a + size)
        self.used += size
        return a

    def _take(self, a, b):
        out = []
        for s, e, t in self.free:
            if e <= a or s >= b:
                out.append((s, e, t))
            else:
                if s < a:
                    out.append((s, a, t))
                if b < e:
                    out.append((b, e, t))
        self.free = out

    def release(self, a, size, now, exact=False):
        size = size if exact else self._round(max(size, 1))
        self.used -= size
        bisect.insort(self.free, (a, a + size, now))
        # merge neighbours freed at the same time (keeps the list short in steady loops)
        out = []
        for seg in self.free:
            if out and out[-1][1] == seg[0] and out[-1][2] == seg[2]:
                out[-1] = (out[-1][0], seg[1], seg[2])
            else:
                out.append(seg)
        self.free = out

    def reserve(self, a, size):
        """Remove [a, a+size) from the free list (explicit placements)."""
        self._take(a, a + size)
        self.used += size


# Buffers per allocation site for a tensor declared in a loop: as many as the memory holds, as
# the compiler's allocator gives (a load -> compute -> store pipeline is otherwise serialised by
# a few buffers x the ~1 us DMA latency). A site takes a fresh buffer while free memory lasts,
# then reuses its own oldest; a site that finds memory full takes the oldest dead buffer of
# another site (_evict_one) before anything live is spilled. None: the deepest plan that spills
# no more than double buffering (plan_memory); a number fixes the depth.
BUFFERS_PER_SITE = None


class _SitePools:
    """The buffers of each allocation site (tensors created at the same source line with the same
    size), reused oldest first like modulo allocation of a loop's tile (BUFFERS_PER_SITE)."""

    def __init__(self, lru, depth=None):
        depth = float("inf") if depth is None else depth
        self.lru, self.depth = lru, depth
        self.pool = {}       # site -> [(freed_at, addr, size)]
        self.owned = {}      # site -> buffers owned (live or pooled)
        self.live_bytes = 0

    def alloc(self, site, size):
        pool = self.pool.get(site)
        if pool and self.owned.get(site, 0) >= self.depth:
            a = self._take_pooled(site)
        else:
            a = self.lru.alloc(size)
            if a is None and pool and not self._older_elsewhere(site):
                a = self._take_pooled(site)
            else:
                while a is None and self._evict_one():
                    a = self.lru.alloc(size)
                if a is not None:
                    self.owned[site] = self.owned.get(site, 0) + 1
        if a is not None:
            self.live_bytes += size
        return a

    def _older_elsewhere(self, site):
        """Another site holds a dead buffer freed before this site's oldest: taking that one
        (LRU over all dead buffers) keeps a site that came late from being stuck with one buffer
        (the first broadcast of a loop held every PSUM bank, the second got one and ran its
        matmul -> VectorE pairs in lock step)."""
        own = min(e[0] for e in self.pool[site])
        return any(e[0] < own for k, p in self.pool.items() if k != site for e in p)

    def _take_pooled(self, site):
        pool = self.pool[site]
        k = min(range(len(pool)), key=lambda j: pool[j][0])
        return pool.pop(k)[1]

    def release(self, site, addr, size, now):
        self.live_bytes -= size
        self.pool.setdefault(site, []).append((now, addr, size))

    def release_to_free_list(self, addr, size, now, exact=False):
        self.live_bytes -= size
        self.lru.release(addr, size, now, exact=exact)

    def _evict_one(self):
        best = None
        for site, pool in self.pool.items():
            for e in pool:
                if best is None or e[0] < best[0][0]:
                    best = (e, site)
        if best is None:
            return False
        e, site = best
        self.pool[site].remove(e)
        self.owned[site] -= 1
        self.lru.release(e[1], e[2], e[0])
        return True


# Buffer depths tried, deepest first, when BUFFERS_PER_SITE is None; 2 is the floor.
_DEPTHS = (None, 16, 8, 4)


def plan_memory(trace: KernelTrace) -> MemoryPlan:
    """The deepest multi-buffering that spills no more bytes than double buffering: extra
    buffers only where memory holds them (greedy deep buffering can fragment SBUF and turn
    dead buffers into spills of live data, which would cost more than the overlap gains)."""
    liveness = _Liveness(trace)
    if BUFFERS_PER_SITE is not None:
        return _plan(trace, BUFFERS_PER_SITE, liveness)
    base = _plan(trace, 2, liveness)
    for depth in _DEPTHS:
        try:
            plan = _plan(trace, depth, liveness)
        except NkiCapacityError:
            continue
        if plan.spill_bytes <= base.spill_bytes:
            return plan
    return base


def _plan(trace: KernelTrace, depth, liveness) -> MemoryPlan:
    plan = MemoryPlan()
    for kind in ("psum", "sbuf"):
        _plan_kind(trace, plan, kind, depth, liveness)
    return plan


class _Liveness:
    """What every plan of one trace starts from (plan_memory tries several buffer depths): the
    uses of each on-chip storage, and for spilling, the clean copies of HBM data and where SBUF
    is over capacity (each a pass over every instruction: found at the first spill only).
    `uses[kind]`: storage id -> [storage, sorted indices of the instructions that touch it], in
    the order the instructions first touch them (the tracer records them: KernelTrace.record)."""

    def __init__(self, trace):
        self.trace = trace
        self.uses = {kind: {s.id: [s, *s.used_at] for s in trace.on_chip_used if s.buffer == kind}
                     for kind in ("psum", "sbuf")}

    @cached_property
    def clean(self):
        """storage id -> the HBM view it copies, for on-chip tensors written only once, whole, by
        a DMA from HBM data that no instruction writes: spilling one needs no store."""
        writers = {}        # storage id -> [(instruction, view)] of every write
        for ins in self.trace.instrs:
            for w in ins.writes:
                writers.setdefault(w.storage.id, []).append((ins, w))
        out = {}
        for sid, ws in writers.items():
            if len(ws) != 1:
                continue
            ins, w = ws[0]
            src = ins.attrs.get("src")
            st = w.storage
            if (ins.op == "dma_copy" and st.on_chip and getattr(src, "storage", None) is not None
                    and not src.storage.on_chip and src.storage.id not in writers
                    and src.dtype == w.dtype
                    and w.num_partitions * w.free_size == st.partitions * st.free_elems):
                out[sid] = src
        return out

    @cached_property
    def over(self):
        """Sorted instruction indices where the SBUF tensors live there (first to last use, before
        any spill) need more than a partition's usable bytes: the points a spilled tensor cannot
        be back in memory across."""
        t, n = self.trace.target, len(self.trace.instrs)
        align = t.sbuf_alloc_align_bytes
        diff = [0] * (n + 1)
        for lst in self.uses["sbuf"].values():
            size = -(-max(lst[0].bytes_per_partition, 1) // align) * align
            diff[lst[1]] += size
            diff[lst[-1] + 1] -= size
        out, need = [], 0
        for k in range(n):
            need += diff[k]
            if need > t.sbuf_usable_bytes_per_partition:
                out.append(k)
        return out


def _fmt_live(live, uses, kind, cap):
    """What a capacity error lists: the live tensors (`live`: storage id -> (addr, size)),
    largest first."""
    rows = sorted(((uses[s][0], z) for s, (_, z) in live.items()), key=lambda r: -r[1])
    lines = [f"    {s.describe()}: {size} B/partition" for s, size in rows[:8]]
    if len(rows) > 8:
        lines.append(f"    ... and {len(rows) - 8} more")
    used = sum(size for _, size in rows)
    return f"{used} of {cap} bytes per partition live in {kind.upper()}:\n" + "\n".join(lines)


def _plan_kind(trace: KernelTrace, plan: MemoryPlan, kind: str, depth, liveness) -> None:
    t = trace.target
    cap = t.sbuf_usable_bytes_per_partition if kind == "sbuf" else t.psum_bytes_per_partition
    align = t.sbuf_alloc_align_bytes if kind == "sbuf" else t.psum_bank_bytes_per_partition
    ring = _SitePools(_LruAllocator(cap, align), depth)
    uses = dict(liveness.uses[kind])      # a spill replaces its storage's entry (_spill)
    if not uses:
        return
    starts = [(lst[1], n, sid) for n, (sid, lst) in enumerate(uses.items())]
    heapq.heapify(starts)
    live = {}           # sid -> (addr, size)
    ends = []           # heap of (last_use, sid)
    explicit = []       # (first, last, storage, p0, addr, size)
    peak = 0
    while starts:
        i = starts[0][0]
        batch = []
        while starts and starts[0][0] == i:
            batch.append(heapq.heappop(starts)[2])
        # release tensors dead before i
        while ends and ends[0][0] < i:
            _, sid = heapq.heappop(ends)
            if sid in live:
                addr, size = live.pop(sid)
                st = uses[sid][0]
                if st.address is not None:
                    ring.release_to_free_list(addr, size, i, exact=True)
                else:
                    ring.release(_site(st), addr, size, i)
        # new tensors, and spilled tensors coming back, get an address at their first use
        for sid in batch:
            st = uses[sid][0]
            size = st.bytes_per_partition
            ins = trace.instrs[i]
            if size > cap:
                raise NkiCapacityError(
                    f"{st.describe()} needs {size} bytes per partition but {kind.upper()} has "
                    f"{cap} per partition on {t.name}; tile it into smaller tensors",
                    st.loc or ins.loc, f"{kind} allocation")
            if st.address is not None:
                p0, addr = st.address
                last = uses[sid][-1]
                for (f2, l2, s2, q0, a2, z2) in explicit:
                    if (f2 <= last and i <= l2 and a2 < addr + size and addr < a2 + z2
                            and q0 < p0 + st.partitions and p0 < q0 + s2.partitions):
                        raise NkiOverlapError(
                            f"{st.describe()} at partition {p0}, bytes [{addr}, {addr + size}) "
                            f"overlaps {s2.describe()} at partition {q0}, bytes [{a2}, {a2 + z2}) "
                            f"while both are live (instructions {max(f2, i)}..{min(l2, last)}); "
                            "move one of them", ins.loc, f"{kind} allocation")
                bank = t.psum_bank_bytes_per_partition
                if kind == "psum" and (size <= bank and addr // bank != (addr + size - 1) // bank
                                       or size > bank and addr % bank):
                    raise NkiCapacityError(
                        f"{st.describe()} placed at PSUM byte {addr} ({size} B/partition) "
                        f"straddles a {bank}-byte bank boundary: an accumulation group must stay "
                        f"in one bank; place it at a multiple of {bank}", ins.loc,
                        f"{kind} allocation")
                if addr + size > cap:
                    raise NkiCapacityError(
                        f"{st.describe()} placed at byte {addr} ends at {addr + size}, past the "
                        f"{cap} bytes of a {kind.upper()} partition", ins.loc, f"{kind} allocation")
                explicit.append((i, last, st, p0, addr, size))
                ring.lru.reserve(addr, size)
                ring.live_bytes += size
                live[sid] = (addr, size)
                plan.segments.setdefault(sid, []).append(Segment(i, last, p0, addr, size))
                heapq.heappush(ends, (last, sid))
                continue
            addr = ring.alloc(_site(st), size)
            if addr is None and uses[sid][1] > i:
                # a reload brought forward finds no room yet: it waits for its use
                _defer_reload(plan, sid, uses[sid][1])
                heapq.heappush(starts, (uses[sid][1], len(uses) + len(plan.spills), sid))
                continue
            while addr is None:
                if kind == "psum":
                    raise NkiCapacityError(
                        f"PSUM is full: allocating {st.describe()} ({-(-size // align) * align} "
                        f"B/partition, whole 2 KiB banks) with {_fmt_live(live, uses, kind, cap)}\n"
                        f"  PSUM cannot spill: evict finished accumulations to SBUF before "
                        f"allocating new PSUM tiles, or use fewer/smaller PSUM tiles "
                        f"(8 banks of 2 KiB per partition)", ins.loc, f"nisa.{ins.op}")
                operands = {a.storage.id for a in ins.reads + ins.writes}
                victim = _pick_victim(live, uses, i, exclude=operands | set(batch))
                if victim is None:
                    raise NkiCapacityError(
                        f"SBUF is full and nothing can be spilled: allocating {st.describe()} "
                        f"({size} B/partition) with {_fmt_live(live, uses, kind, cap)}", ins.loc,
                        f"nisa.{ins.op}")
                back = _spill(trace, plan, uses, live, ring, victim, i, liveness.clean.get(victim),
                              liveness.over)
                heapq.heappush(starts, (back, len(uses) + len(plan.spills), victim))
                addr = ring.alloc(_site(st), size)
            live[sid] = (addr, size)
            peak = max(peak, ring.live_bytes)
            end = uses[sid][-1]
            plan.segments.setdefault(sid, []).append(Segment(i, end, 0, addr, size))
            heapq.heappush(ends, (end, sid))
        peak = max(peak, ring.live_bytes)
    plan.peak_bytes_per_partition[kind] = max(plan.peak_bytes_per_partition[kind], peak)


def _site(st):
    return (st.loc, st.bytes_per_partition)


def _pick_victim(live, uses, i, exclude):
    best, best_next = None, -1
    for sid in live:
        if sid in exclude or uses[sid][0].address is not None:
            continue
        idx = uses[sid]
        k = bisect.bisect_left(idx, i, lo=1)       # its next use, if it has one
        if k < len(idx) and idx[k] > best_next:
            best, best_next = sid, idx[k]
    return best


def _defer_reload(plan, sid, at):
    for n in range(len(plan.spills) - 1, -1, -1):
        ins = plan.spills[n][1]
        if ins.attrs["storage"].id == sid and ins.attrs["when"] == "reload":
            plan.spills[n] = (at, ins)
            return


def _spill(trace, plan, uses, live, ring, sid, i, source=None, over=()):
    """Write ``sid`` to HBM before instruction i; reload it before its next use, as early as
    memory allows: right after the last instruction before that use where the kernel's live
    tensors overflow (`over`), so the reload overlaps the work in between as the compiler's
    scheduled reloads do instead of stalling the use. A clean copy of HBM data (`source`) is not
    written: the reload fetches `source` again. Returns the index the reload goes before."""
    st = uses[sid][0]
    addr, size = live.pop(sid)
    ring.release_to_free_list(addr, size, i)
    seg = plan.segments[sid][-1]
    seg.end = i - 1
    idx = uses[sid]
    k = bisect.bisect_left(idx, i, lo=1)
    nxt = idx[k]
    nbytes = st.partitions * st.bytes_per_partition
    # (program._emit_spill makes their DMAs from the storage)
    out = Instr(-1, "spill_store", "dma", (), (), dict(storage=st, when="store"),
                trace.instrs[i].loc)
    back = Instr(-1, "spill_reload", "dma", (), (), dict(storage=st, when="reload"),
                 trace.instrs[nxt].loc)
    if source is None:
        plan.spills.append((i, out))
        plan.spill_bytes += nbytes
    else:
        back.attrs["source"] = source
    j = bisect.bisect_left(over, nxt) - 1
    at = max(i + 1, over[j] + 1) if j >= 0 else i + 1
    at = min(at, nxt)
    plan.spills.append((at, back))
    plan.spill_bytes += nbytes
    # the remaining uses become a fresh allocation starting where the reload goes
    uses[sid] = [st] + idx[k:]
    return at
