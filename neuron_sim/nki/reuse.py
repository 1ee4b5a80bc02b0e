"""Loop-invariant instructions computed once, as the compiler hoists them out of affine loops.

A kernel that computes, in every iteration of a loop, a value that does not depend on the
iteration (the Mamba tutorial's v2 computes `deltaU = delta * u` inside its state loop, with
delta and u loaded once per channel tile) gets that instruction executed once where the chip's
compiler moves loop-invariant code (hardware/assumptions.py `reuse_loop_invariant`: Trn1). The
trace is unrolled, so on it that reads: an instruction equal to the one the same kernel line
traced in the previous iteration of the innermost `nl.affine_range` loop (same operation and
arguments, the same views of the same tiles, none of them written since) that writes a whole
fresh tile nothing else writes is dropped, and whatever reads its tile reads the earlier one,
which so stays live through the loop.

On a chip whose compiler keeps the kernel as written (Trn2, Trn3) nothing is dropped; the report
names the line instead, as advice to compute it before the loop.

Only pure compute instructions qualify, those whose ISA module declares `PURE = True` (no engine
accumulator state, no random draw, no DMA: a load of the same bytes is not merged), and only in
affine loops: a `sequential_range` keeps its body in order, and so does a loop the trace cannot
see (Python's range, static_range).
"""

from __future__ import annotations

from ..isa import pure_instructions
from .tensor import NkiTensor

PURE = pure_instructions()      # the instructions whose ISA module declares PURE = True


class _Book:
    """Per trace: at each line (and operation: a broadcast's copies share their consumer's line)
    the key, first tile and loop position of the previous candidate; the tiles found equal to an
    earlier one (alias: storage id -> the earlier storage); the instructions to drop."""

    __slots__ = ("last", "alias", "dups")

    def __init__(self):
        self.last, self.alias, self.dups = {}, {}, []


def note(trace, ins) -> None:
    """Called by the tracer for every instruction of a PURE operation, after its writes count."""
    book = trace.reuse
    if book is None:
        book = trace.reuse = _Book()
    loop = trace.loop
    key = _key(ins, book.alias) if loop is not None and loop[0] == "affine" else None
    line = (ins.loc, ins.op)
    prev = book.last.get(line)
    if key is None:
        book.last.pop(line, None)
        return
    if prev is not None and prev[0] == key and prev[2][1] == loop[1] and prev[2][2] == loop[2] - 1:
        st = ins.writes[0].storage
        book.alias[st.id] = prev[1]
        book.dups.append((ins, prev[1], key[2]))
    book.last[line] = (key, book.alias.get(ins.writes[0].storage.id, ins.writes[0].storage), loop)


def _key(ins, alias):
    """What makes two executions of a line compute the same tile, or None if this one cannot be
    merged: it writes one whole tile no instruction touched before, and reads at least one."""
    if ins.loc is None or len(ins.writes) != 1 or not ins.reads:
        return None
    dst = ins.writes[0]
    st = dst.storage
    if (not st.on_chip or st.address is not None or st.write_count != 1 or st.first_use != ins.index
            or not dst.covers_storage()):
        return None
    reads, via = [], []
    for a in ins.reads:
        s = alias.get(a.storage.id)
        if s is None:
            s = a.storage
        else:
            via.append(a.storage.id)
        reads.append((s.id, s.write_count, a.geometry()))
    args = []
    for k, v in ins.attrs.items():
        if v.__class__ is NkiTensor:
            continue                    # operands: compared as reads and dst
        if k == "seed" or (k == "reduce_cmd" and getattr(v, "value", v) not in (None, "idle")):
            return None
        args.append((k, v.__class__, repr(v)))
    return (ins.op, ins.engine, tuple(via), tuple(reads), dst.geometry(), tuple(args))


def apply(trace) -> int:
    """Drop the instructions `note` found equal to an earlier one, if the tiles involved are each
    written once in the whole kernel (a tile written again later holds another value then), and
    point their readers at the earlier tile; returns how many were dropped. On a chip whose
    compiler keeps the kernel as written, nothing is dropped: a finding says what to hoist."""
    book, trace.reuse = trace.reuse, None          # its keys hold the kernel's tiles
    if book is None or not book.dups:
        return 0
    alias, bad = {}, set()
    for ins, first, via in book.dups:
        st = ins.writes[0].storage
        if first.write_count != 1 or st.write_count != 1 or any(s in bad for s in via):
            bad.add(st.id)
        else:
            alias[st.id] = first
    if not alias:
        return 0
    hoisted = trace.target.reuse_loop_invariant
    _report(trace, book, alias, hoisted)
    if not hoisted:
        return 0
    drop = {id(ins) for ins, _, _ in book.dups if ins.writes[0].storage.id in alias}
    kept = []
    for ins in trace.instrs:
        if id(ins) in drop:
            continue
        if any(a.storage.id in alias for a in ins.reads):
            ins.reads = tuple([_on(a, alias) for a in ins.reads])
            ins.attrs = {k: _on(v, alias) if v.__class__ is NkiTensor else v
                         for k, v in ins.attrs.items()}
        kept.append(ins)
    _renumber(trace, kept)
    return len(drop)


def _on(view, alias):
    s = alias.get(view.storage.id)
    return view if s is None else NkiTensor(s, view.shape, view.strides, view.offset)


def _renumber(trace, instrs) -> None:
    """The on-chip liveness the tracer records (tracer.track_use), for the shorter stream."""
    from .tracer import track_use       # tracer imports this module
    for s in trace.on_chip_used:
        s.first_use = s.last_use = None
        s.used_at = []
    used = []
    for idx, ins in enumerate(instrs):
        ins.index = idx
        for a in ins.reads + ins.writes:
            if a.storage.on_chip:       # HBM tensors keep theirs (shared by an LNC pair's traces)
                track_use(a.storage, idx, used)
    trace.instrs = instrs
    trace.on_chip_used = used


def _report(trace, book, alias, hoisted) -> None:
    from .tracer import Finding
    counts = {}
    for ins, _, _ in book.dups:
        if ins.writes[0].storage.id in alias:
            op, n = counts.get(ins.loc, (ins.op, 0))
            counts[ins.loc] = (op, n + 1)
    for loc, (op, n) in counts.items():
        what = (f"it runs once and {n} later executions reuse its result (the compiler hoists "
                f"it): computing it before the loop says so in the kernel" if hoisted else
                f"{n} later executions are timed, as the compiler keeps the kernel as written: "
                f"compute it once before the loop")
        trace.findings.append(Finding(
            "loop-invariant", f"nisa.{op} computes the same tile as in its previous iteration; "
            + what, loc))
