"""The bulk side of `ProgramBuilder.repeat`: loop iterations written with NumPy from a few that ran.

The builder keeps what it has appended as segments (`Seg`): each row's id in the builder's table of
distinct rows (COLUMNS values), its explicit dependencies (CSR, global indices) and its operands'
accesses (CSR: tensor track, read or write, box, and the access pattern's partition start and
element offset), plus, per row, the operand record it came from (`base`, an index into the
builder's pool of `Emit`s) and its class (everything about the record but tensor identity and
operand positions; equal classes, tracks and positions mean equal records). A loop iteration is
the run of segments its body appended.

`find_template` decides from the iterations that ran whether the rest follow: every iteration has
the same rows and classes; tensor tracks repeat with a period p (tiles taken round-robin from p
buffers); every box, partition start and offset moves by the same step from one iteration to the
next; each explicit dependency either stays or moves by the iteration's length; the builder's own
state (DMA queue round-robin, stationary reuse, spill bytes) evolves the same way and nothing is
allocated, freed or signalled. `synthesize` then writes iteration k as the sample of its phase
shifted by the steps. The program is the one the plain loop builds: the dependency pass
(neuron_sim/kernels/deps.py) sees the written accesses exactly as if appended one by one, and
`LazyEmits` makes an operand record on demand from its base record and the shifted positions."""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter

import numpy as np

from ..kernels.repeat import _same_step, _synthesize

# Round-robin periods looked for (tiles taken from up to PERIOD_MAX buffers in turn)
PERIOD_MAX = 8
SAME = "same"       # the loop leaves the stationary key as it found it


@dataclasses.dataclass
class Seg:
    rid: np.ndarray         # [n] row ids: ProgramBuilder._table[rid] holds the COLUMNS values
    x_ptr: np.ndarray       # [n + 1] local CSR over x_idx
    x_idx: np.ndarray       # explicit dependencies, global instruction indices
    acc_ptr: np.ndarray     # [n + 1] local CSR over the accesses
    track: np.ndarray       # per access: dense tensor track
    write: np.ndarray       # per access: 0 read, 1 write
    box: np.ndarray         # per access: [p0, p1, f0, f1]
    pst: np.ndarray         # per access: AccessPattern.p_start
    off: np.ndarray         # per access: AccessPattern.offset
    base: np.ndarray        # per row: index of its operand record in the pool (-1: none kept)
    cls: np.ndarray         # per row: class id (-1: made outside any repeat)

    @property
    def n(self) -> int:
        return self.rid.shape[0]


_ROW_FIELDS = ("rid", "base", "cls")
_PTR_FIELDS = ("x_ptr", "acc_ptr")      # one entry more than rows
_ACC_FIELDS = ("track", "write", "box", "pst", "off")
_GROUPS = (_ROW_FIELDS + _PTR_FIELDS, ("x_idx",), _ACC_FIELDS)   # by capacity: rows, deps, accesses
# Entries a column grows to at least once the first 1024 rows are full: address space only
# (np.empty maps it, pages are touched as rows are written), so a big program writes its rows
# once instead of copying them at each growth
GROW_MIN = 1 << 20


# Columns of Segments whose builders are gone (Segments.recycle), one per column name, for the
# next Segments: a fresh page costs a fault and the kernel's zero fill on first touch (~2.5 us
# per 4 KiB page here; a 90k-row program's scratch columns are ~3k pages), a reused one neither.
# What the spare columns touched stays resident meanwhile (~11 MB after a 90k-row program).
_SPARE: dict = {}


def _spare_cap(f) -> int:
    """The capacity (rows, deps or accesses) of the spare column f (0: none)."""
    a = _SPARE.get(f)
    return 0 if a is None else a.shape[0] - (f in _PTR_FIELDS)


def _column(f, size, shape=()) -> np.ndarray:
    """An int64 column named f of `size` entries: the spare one if it is that long."""
    a = _SPARE.get(f)
    # pop is one atomic step: of builders in threads asking at once, one gets the spare
    if a is not None and a.shape == (size,) + shape and _SPARE.pop(f, None) is a:
        return a
    return np.empty((size,) + shape, np.int64)


class Segments:
    """The segments a builder has written, end to end in growable NumPy columns (what a list of
    Segs concatenated would be, without the copy): `append(seg)` adds one, `synthesize` writes
    loop iterations straight into the columns, `len()` counts segments and `[a:b]` is the run of
    segments a..b-1 as one Seg of views (CSR pointers made local). Rows are never changed once
    written, so a view stays valid after the columns grow (it keeps the old buffer)."""

    def __init__(self):
        self.n = self.nx = self.na = 0          # rows, explicit deps, accesses written
        self.bounds = [0]                       # first row of each segment, then the end
        self.synthetic = False                  # rows written by synthesize() among them
        self._cap = [0, 0, 0]
        self._grow([1024, 1024, 2048])

    def reserve(self, rows, xs, accs) -> tuple:
        """Room for `rows` rows, `xs` explicit deps and `accs` accesses more; returns where they
        go (row, dep, access offsets). A growth makes 8x the room needed, and at least GROW_MIN
        entries: pages never written are never touched, so the unused tail costs nothing, and
        a growth copies what was written into fresh pages (C8 grew 89k -> 722k rows at 34k:
        6 MB copied, 1.3k page faults, ~12-23 ms of a ~150 ms build)."""
        cap = self._cap
        if self.n + rows > cap[0] or self.nx + xs > cap[1] or self.na + accs > cap[2]:
            need = (self.n + rows, self.nx + xs, self.na + accs)
            self._grow([max(c, 8 * k, GROW_MIN) if k > c else c for k, c in zip(need, cap)])
        return self.n, self.nx, self.na

    def _grow(self, cap) -> None:
        """Columns of capacities at least `cap` (rows, deps, accesses) holding what was written:
        past GROW_MIN, of a spare column's capacity when that is more (_SPARE; the fresh columns
        beside it are address space until written)."""
        def moved(f, size, used, shape=()):
            new = _column(f, size, shape)
            if not first:
                new[:used] = getattr(self, f)[:used]
            setattr(self, f, new)
        first = self._cap[0] == 0
        # (a small program's first columns are its own: a spare's pages are for big ones)
        cap = [max([c] + [_spare_cap(f) for f in fields]) if c != old and c >= GROW_MIN else c
               for c, old, fields in zip(cap, self._cap, _GROUPS)]
        if cap[0] != self._cap[0]:
            for f in _ROW_FIELDS:
                moved(f, cap[0], self.n)
            for f in _PTR_FIELDS:
                moved(f, cap[0] + 1, self.n + 1)
            if first:
                self.x_ptr[0] = self.acc_ptr[0] = 0
        if cap[1] != self._cap[1]:
            moved("x_idx", cap[1], self.nx)
        if cap[2] != self._cap[2]:
            for f in _ACC_FIELDS:
                moved(f, cap[2], self.na, (4,) if f == "box" else ())
        self._cap = cap

    def recycle(self) -> None:
        """Hand the columns to the next Segments (_SPARE) and forget them: for a builder that is
        gone. A column something still sees through a view (a Program's LazyEmits) stays
        with it. (A small program's columns are left to be freed: only big ones are kept.)"""
        if max(self._cap) < GROW_MIN:
            return
        for f in sum(_GROUPS, ()):
            a = getattr(self, f)
            setattr(self, f, None)
            # references: `a` and getrefcount's argument; each view of the column adds one
            if sys.getrefcount(a) == 2 and a.shape[0] >= GROW_MIN:
                _SPARE[f] = a
        self._cap = [0, 0, 0]

    def advance(self, rows, xs, accs, synthetic, cuts=()) -> None:
        """Count rows, deps and accesses written after reserve() as one more segment, or as
        several: one ending after each of `cuts` rows (ascending) and one with the rest."""
        self.bounds += [self.n + c for c in cuts if c < rows]
        self.n, self.nx, self.na = self.n + rows, self.nx + xs, self.na + accs
        self.bounds.append(self.n)
        self.synthetic |= synthetic

    def append(self, seg: Seg) -> None:
        k, nx, na = seg.n, seg.x_idx.shape[0], seg.track.shape[0]
        r, x, a = self.reserve(k, nx, na)
        for f in _ROW_FIELDS:
            getattr(self, f)[r:r + k] = getattr(seg, f)
        self.x_ptr[r + 1:r + k + 1] = seg.x_ptr[1:] + x
        self.acc_ptr[r + 1:r + k + 1] = seg.acc_ptr[1:] + a
        self.x_idx[x:x + nx] = seg.x_idx
        for f in _ACC_FIELDS:
            getattr(self, f)[a:a + na] = getattr(seg, f)
        self.advance(k, nx, na, False)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, segs: slice) -> Seg:
        i, j, _ = segs.indices(len(self))
        r0, r1 = self.bounds[i], self.bounds[max(i, j)]
        x0, x1, a0, a1 = self.x_ptr[r0], self.x_ptr[r1], self.acc_ptr[r0], self.acc_ptr[r1]
        xp, ap = self.x_ptr[r0:r1 + 1], self.acc_ptr[r0:r1 + 1]
        return Seg(self.rid[r0:r1], xp - x0 if x0 else xp, self.x_idx[x0:x1],
                   ap - a0 if a0 else ap, self.track[a0:a1], self.write[a0:a1],
                   self.box[a0:a1], self.pst[a0:a1], self.off[a0:a1], self.base[r0:r1],
                   self.cls[r0:r1])


def emit_key(e):
    """What makes two operand records equal apart from their tensors and operand positions. Not
    hashable when a parameter is not (the builder never repeats such rows in bulk)."""
    d = e.dma
    return (e.name, e.engine, e.kind, e.ii_cycles, e.lat_cycles, e.flops,
            None if d is None else (d.bytes, d.hbm_bytes, d.descriptors, d.engines, d.engine0,
                                    d.queue, d.dge, d.direction, d.engine_ns, d.hbm_ns, d.issue_ns),
            tuple([a.form() for a in e.reads]),
            tuple([a.form() for a in e.writes]),
            tuple(e.params.items()))


@dataclasses.dataclass
class Snapshot:
    """The builder state an iteration leaves behind that the next ones depend on."""
    segs: int               # segments so far
    mut: int                # allocations, frees, semaphore uses so far
    queue: int              # DMA queue round-robin
    spill: float
    stationary: object      # _last_stationary
    stationary_version: int  # the stationary tensor's writes so far (-1: no stationary)


@dataclasses.dataclass
class Template:
    """The last p iterations that ran (stacked by phase) and the steps between iterations."""
    first: int              # iteration of phase 0
    period: int
    length: int             # rows per iteration
    rid: np.ndarray
    cls: np.ndarray
    row_acc: np.ndarray     # accesses per row
    row_x: np.ndarray       # explicit deps per row
    write: np.ndarray
    track: np.ndarray       # [p, accesses]
    base: np.ndarray        # [p, rows]
    box: np.ndarray         # [p, accesses, 4]
    pst: np.ndarray         # [p, accesses]
    off: np.ndarray
    x_idx: np.ndarray       # [p, deps]
    d_box: np.ndarray       # steps per iteration
    d_pst: np.ndarray
    d_off: np.ndarray
    x_moves: np.ndarray     # per dep: 1 if it moves by `length` per iteration, 0 if it stays
    d_spill: float
    snaps: list             # Snapshot at the end of each phase's sample
    d_stationary: tuple     # (partition start, offset) step of the stationary key
    # from_precedent: (spill shift, stationary key map) that move the precedent's snaps to this
    # loop's, applied to the one snap state_after reads (a loop reads one of its p)
    snap_moved: tuple | None = None
    # per phase: [(track, writes)] of its sample, made once (write_counts)
    phase_writes: list | None = None


class Sample:
    """One iteration that ran, as views of its segments (nothing copied): `same(other)` means
    same rows, classes and operand structure, `same_tracks(other)` same tensor tracks;
    `positions()` is every position that may move (boxes, partition starts, offsets, explicit
    deps). The byte strings are made once, when first asked for: a sample is compared with its
    neighbours and, as a precedent's, with later loops' (one comparison of bytes instead of one
    per field)."""
    __slots__ = ("seg", "_sig", "_trk")

    def __init__(self, seg: Seg):
        self.seg = seg
        self._sig = self._trk = None

    def sig(self) -> tuple:
        """Rows, classes and operand structure (rid, cls, acc_ptr, x_ptr, write) as bytes, with
        the lengths that make equal bytes mean equal arrays."""
        if self._sig is None:
            seg = self.seg
            self._sig = (seg.n, seg.write.shape[0], seg.x_idx.shape[0], b"".join(
                [seg.rid.tobytes(), seg.cls.tobytes(), seg.acc_ptr.tobytes(),
                 seg.x_ptr.tobytes(), seg.write.tobytes()]))
        return self._sig

    def same(self, other: "Sample") -> bool:
        return self.sig() == other.sig()

    def same_tracks(self, other: "Sample") -> bool:
        if self._trk is None:
            self._trk = self.seg.track.tobytes()
        if other._trk is None:
            other._trk = other.seg.track.tobytes()
        return self._trk == other._trk

    def positions(self) -> tuple:
        """(box [accesses, 4], pst, off, x_idx)."""
        seg = self.seg
        return seg.box, seg.pst, seg.off, seg.x_idx

    def repeatable(self) -> bool:
        return self.seg.n > 0 and bool((self.seg.cls >= 0).all())


def _stationary_step(snaps, period):
    """(partition start, offset) step of the stationary key per iteration; SAME if no iteration
    changes the key; None if the key does not move affinely (or its tensor is written after it
    was loaded)."""
    keys = [s.stationary for s in snaps]
    if all(k == keys[0] for k in keys):
        return SAME
    if any(k is None for k in keys):
        return None
    aps = [k[0] for k in keys]
    for s, k in zip(snaps, keys):
        if k[1] != s.stationary_version:
            return None
    d = (aps[1].p_start - aps[0].p_start, aps[1].offset - aps[0].offset)
    for j in range(1, len(aps)):
        a, b = aps[j - 1], aps[j]
        if (b.p_start - a.p_start, b.offset - a.offset) != d or (a.p_size, a.dims, a.p_stride) \
                != (b.p_size, b.dims, b.p_stride):
            return None
        if j >= period and aps[j].tensor is not aps[j - period].tensor:
            return None
    return d


def _steps(a: Sample, b: Sample) -> list:
    """b's positions minus a's, [box, pst, off, x_idx] (same() samples: the same layout)."""
    return [y - x for x, y in zip(a.positions(), b.positions())]


def _same_steps(a: Sample, b: Sample, d: list) -> bool:
    """Whether b's positions minus a's are the steps d (_steps' form)."""
    return _same_step(*a.positions(), *b.positions(), *d)


def find_template(its: list, snaps: list, before: Snapshot, first: int):
    """A Template if the iterations `its` (Samples of iterations first, first+1, ...; at least 3,
    all the same()), which ended in `snaps` after `before`, follow one affine pattern; else
    None."""
    m = len(its)
    if m < 3 or before.mut != snaps[-1].mut or any(s.queue != before.queue for s in snaps):
        return None
    # the period first: the cheap test, and the one a loop whose tiles rotate through p buffers
    # fails at each of its first p iterations (the builder asks again after every iteration)
    for p in range(1, min(PERIOD_MAX, m - 1) + 1):
        if all(its[j].same_tracks(its[j - p]) for j in range(p, m)):
            break
    else:
        return None
    spills = [before.spill] + [s.spill for s in snaps]
    d_spill = spills[1] - spills[0]
    for j in range(2, m):
        if spills[j + 1] - spills[j] != d_spill:
            return None
    s0 = its[0].seg
    L = s0.n
    d = _steps(its[0], its[1])
    d_x = d[3]
    if not ((d_x == 0) | (d_x == L)).all():
        return None
    for j in range(2, m):
        if not _same_steps(its[j - 1], its[j], d):
            return None
    d_st = _stationary_step(snaps, p)
    if d_st is None:
        return None
    last = [s.seg for s in its[m - p:]]
    # per phase, its sample: the segments' own rows when there is one phase (a view: rows are
    # never changed once written), else stacked
    stack = (lambda f: getattr(last[0], f)[None]) if p == 1 else \
        (lambda f: np.stack([getattr(s, f) for s in last]))
    return Template(
        first=first + m - p, period=p, length=L, rid=s0.rid, cls=s0.cls,
        row_acc=np.diff(s0.acc_ptr), row_x=np.diff(s0.x_ptr), write=s0.write,
        track=stack("track"), base=stack("base"), box=stack("box"), pst=stack("pst"),
        off=stack("off"), x_idx=stack("x_idx"), d_box=d[0], d_pst=d[1], d_off=d[2],
        x_moves=(d_x != 0).astype(np.int64), d_spill=d_spill, snaps=snaps[m - p:],
        d_stationary=d_st)


@dataclasses.dataclass
class Precedent:
    """An earlier repeat() of the same loop body and count that was written in bulk: the
    iterations it ran up to the second of its pattern, and its template."""
    t: Template
    window: int             # its first affine iteration (0, or 1 when iteration 0 differed)
    its: list               # Samples of iterations 0 .. window + 1
    snaps: list             # Snapshots before iteration 0 .. after iteration window + 1


def from_precedent(pre: Precedent, its: list, snaps: list, tracks: dict, tensors: list):
    """The Template of this loop if its iterations 0 .. window + 1 match the precedent's up to
    one constant shift of every position (same rows, classes; the same steps from one iteration
    to the next; the same spill bytes per iteration; nothing allocated, freed or signalled; the
    stationary key untouched, or moved by the same shift) and one renaming of tensors
    (_renaming): a loop nest's inner loop written in bulk after two iterations instead of a full
    period. `tracks`, `tensors`: the builder's tensor id -> track, track -> Tensor. Else None."""
    w = pre.window
    if len(its) != w + 2:
        return None
    before = snaps[w]
    if snaps[-1].mut != before.mut or any(s.queue != before.queue for s in snaps[w + 1:]):
        return None
    for a, b in zip(its, pre.its):
        if not a.same(b):
            return None
    renamed = _renaming(pre, its, tensors)
    if renamed is None:
        return None
    keys = _shifted_keys(pre, snaps, renamed, tracks, tensors)
    if keys is None:
        return None
    d = _steps(pre.its[w], its[w])
    if not _same_steps(pre.its[w + 1], its[w + 1], d):
        return None
    spills, pre_spills = [s.spill for s in snaps], [s.spill for s in pre.snaps]
    for j in (w, w + 1):
        if spills[j + 1] - spills[j] != pre_spills[j + 1] - pre_spills[j]:
            return None
    t = pre.t
    d_spill = spills[w] - pre_spills[w]
    if renamed:
        track = t.track.copy()
        for x, y in renamed.items():
            track[t.track == x] = y
        t = dataclasses.replace(t, track=track, phase_writes=None)
    return dataclasses.replace(
        t, box=t.box + d[0][None], pst=t.pst + d[1][None], off=t.off + d[2][None],
        x_idx=t.x_idx + d[3][None], snap_moved=(d_spill, keys))


def _renaming(pre: Precedent, its: list, tensors: list):
    """{precedent's track: this loop's} for the tensors this loop uses in place of the
    precedent's ({} when they are the same), or None when no safe renaming explains the
    iterations' tracks. Safe: one to one over every access of iterations 0 .. window + 1, and
    every operand that a renamed track takes in the precedent's pattern takes only tracks those
    iterations show (a tile fixed for the whole loop, e.g. the block an inner loop reads, or a
    pool whose every buffer they show in another order; not a pool whose later members they
    do not show); a new name that the pattern holds is itself renamed; its tensor is known (not
    one of append_rows' bare ids)."""
    if all(a.same_tracks(b) for a, b in zip(its, pre.its)):
        return {}
    pairs = set()
    for a, b in zip(its, pre.its):
        pairs.update(zip(b.seg.track.tolist(), a.seg.track.tolist()))
    forward = dict(pairs)
    if len(forward) != len(pairs) or len(set(forward.values())) != len(forward):
        return None
    renamed = {x: y for x, y in forward.items() if x != y}
    track = pre.t.track
    for x, y in renamed.items():
        if tensors[y] is None or (y not in forward and (track == y).any()):
            return None
        if not forward.keys() >= set(track[:, (track == x).any(axis=0)].ravel().tolist()):
            return None
    return renamed


def _shifted_keys(pre: Precedent, snaps: list, renamed: dict, tracks: dict, tensors: list):
    """How the precedent's stationary keys map to this loop's: a function of a key, or None when
    the two loops' keys after iterations window, window + 1 differ otherwise than by one shift of
    the same tensor's AP (the precedent's tensor or the one `renamed` puts in its place), or the
    tensor was written after it was loaded."""
    w = pre.window
    if pre.t.d_stationary is SAME:
        if any(s.stationary != snaps[w].stationary for s in snaps[w + 1:]):
            return None
        return lambda key: snaps[w].stationary
    shifts = set()
    for a, b in zip(snaps[w + 1:], pre.snaps[w + 1:]):
        if a.stationary is None or b.stationary is None or \
                a.stationary[1] != a.stationary_version:
            return None
        x, y = a.stationary[0], b.stationary[0]
        if x.tensor is not y.tensor and renamed.get(tracks.get(y.tensor.id)) != \
                tracks.get(x.tensor.id):
            return None
        if (x.p_size, x.dims, x.p_stride) != (y.p_size, y.dims, y.p_stride):
            return None
        shifts.add((x.p_start - y.p_start, x.offset - y.offset))
    if len(shifts) != 1:
        return None
    dp, do = shifts.pop()

    def moved(key):
        ap = key[0]
        to = renamed.get(tracks.get(ap.tensor.id))
        return (dataclasses.replace(ap, tensor=ap.tensor if to is None else tensors[to],
                                    p_start=ap.p_start + dp, offset=ap.offset + do, _box=None),
                key[1])
    return moved


def synthesize(t: Template, start: int, stop: int, out: Segments) -> int:
    """Write iterations start .. stop-1 of the loop `t` describes into `out`, as one segment;
    returns its rows. One pass of neuron_sim/kernels/repeat.py's kernel over the output
    (synthesize_reference is the same in NumPy)."""
    K, L = stop - start, t.length
    nx, na = t.x_idx.shape[1], t.track.shape[1]
    r, x, a = out.reserve(K * L, K * nx, K * na)
    _synthesize(start, stop, t.first, t.period, t.rid, t.cls, t.write, t.row_x, t.row_acc,
                t.base, t.track, t.box, t.pst, t.off, t.x_idx, t.d_box, t.d_pst, t.d_off,
                t.x_moves, r, x, a, out.rid, out.cls, out.write, out.x_ptr, out.acc_ptr,
                out.base, out.track, out.box, out.pst, out.off, out.x_idx)
    out.advance(K * L, K * nx, K * na, True)
    return K * L


def synthesize_reference(t: Template, start: int, stop: int, out: Segments) -> int:
    """`synthesize` in NumPy, the specification of its kernel: iteration k is the sample of its
    phase shifted by the steps, computed in place."""
    K, L = stop - start, t.length
    nx, na = t.x_idx.shape[1], t.track.shape[1]
    r, x, a = out.reserve(K * L, K * nx, K * na)
    rows, xs, accs = slice(r, r + K * L), slice(x, x + K * nx), slice(a, a + K * na)
    out.rid[rows].reshape(K, L)[:] = t.rid
    out.cls[rows].reshape(K, L)[:] = t.cls
    out.write[accs].reshape(K, na)[:] = t.write
    for ptr, counts, at in ((out.x_ptr, t.row_x, x), (out.acc_ptr, t.row_acc, a)):
        per = int(counts.sum())
        ptr[r + 1:r + K * L + 1].reshape(K, L)[:] = \
            np.cumsum(counts)[None] + (at + per * np.arange(K, dtype=np.int64))[:, None]
    base, track = out.base[rows].reshape(K, L), out.track[accs].reshape(K, na)
    x_idx, box = out.x_idx[xs].reshape(K, nx), out.box[accs].reshape(K, na, 4)
    pst, off = out.pst[accs].reshape(K, na), out.off[accs].reshape(K, na)
    ks = np.arange(start, stop, dtype=np.int64)
    j = (ks - t.first) % t.period                   # phase: which sample to shift
    sh = ks - t.first - j                           # iterations from that sample
    # each iteration's sample (one sample broadcast over all when the period is 1)
    pick = (lambda a: a[:1]) if t.period == 1 else (lambda a: a[j])
    base[:], track[:] = pick(t.base), pick(t.track)
    np.multiply((sh * L)[:, None], t.x_moves[None], out=x_idx)
    x_idx += pick(t.x_idx)
    np.multiply(sh[:, None, None], t.d_box[None], out=box)
    box += pick(t.box)
    for dst, step, sample in ((pst, t.d_pst, t.pst), (off, t.d_off, t.off)):
        np.multiply(sh[:, None], step[None], out=dst)
        dst += pick(sample)
    out.advance(K * L, K * nx, K * na, True)
    return K * L


def write_counts(t: Template, start: int, stop: int) -> dict:
    """{track: writes} of iterations start .. stop-1: each phase's sample's writes times the
    iterations of that phase."""
    p = t.period
    if t.phase_writes is None:
        # counted in Python: a phase writes a few tracks (np.unique cost ~15 us per phase)
        w = t.write == 1
        t.phase_writes = [list(Counter(t.track[j][w].tolist()).items()) for j in range(p)]
    q, extra = divmod(stop - start, p)
    j0 = (start - t.first) % p
    out = {}
    for i in range(min(stop - start, p)):       # iteration start + i has phase j0 + i (mod p)
        k = q + (i < extra)
        for track, c in t.phase_writes[(j0 + i) % p]:
            out[track] = out.get(track, 0) + k * c
    return out


def state_after(t: Template, k: int):
    """(spill bytes, stationary key) after iteration k of the loop: the key as the builder keeps
    it, (AP, version) or None, with the version still to be filled in (-1)."""
    j = (k - t.first) % t.period
    sh = k - t.first - j
    snap = t.snaps[j]
    spill, stationary = snap.spill, snap.stationary
    if t.snap_moved is not None:
        d_spill, keys = t.snap_moved
        spill, stationary = spill + d_spill, keys(stationary)
    spill += sh * t.d_spill
    if t.d_stationary is SAME or stationary is None:
        return spill, stationary
    ap = stationary[0]
    dp, do = t.d_stationary
    return spill, (dataclasses.replace(ap, p_start=ap.p_start + sh * dp,
                                       offset=ap.offset + sh * do, _box=None), -1)


class LazyEmits:
    """Program.emits of a program with bulk-written rows: the operand record of row i is made when
    asked for, from its base record with the operands moved to the row's positions and, where a
    loop was written from a precedent on other tensors (from_precedent), put on the row's
    tensors (`tensors`: track -> Tensor, None for a track known only by id)."""

    def __init__(self, pool, base, acc_ptr, pst, off, track, tensors):
        self._pool, self._base, self._ptr, self._pst, self._off = pool, base, acc_ptr, pst, off
        self._track, self._tensors = track, tensors

    def __len__(self):
        return int(self._base.shape[0])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"instruction {i} out of range for a program of {n}")
        i = int(i) % n
        b = int(self._base[i])
        if b < 0:
            return None
        e = self._pool[b]
        a = int(self._ptr[i])
        aps = e.reads + e.writes
        moved = None
        for q, ap in enumerate(aps):
            p, o = int(self._pst[a + q]), int(self._off[a + q])
            t = self._tensors[self._track[a + q]]
            if t is None:
                t = ap.tensor
            if p != ap.p_start or o != ap.offset or t is not ap.tensor:
                if moved is None:
                    moved = list(aps)
                moved[q] = dataclasses.replace(ap, tensor=t, p_start=p, offset=o, _box=None)
        if moved is None:
            return e
        r = len(e.reads)
        return dataclasses.replace(e, reads=tuple(moved[:r]), writes=tuple(moved[r:]),
                                   params=dict(e.params))
