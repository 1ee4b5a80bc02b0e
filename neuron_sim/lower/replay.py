"""An op's emission recorded once per lowering context and re-appended when the context recurs.

The eager backend lowers each op alone, then each fused group of up to 32 ops; the groups of a
training step are windows over the same per-layer sequence, so most ops of a group meet the
same situation they met alone or in an earlier group. What a rule emits is a function of that
situation (`_context`): the op's name and arguments (floats by value, tensors by layout, and
which of its tensors are the same tensor); per tensor, whether it is resident in SBUF (the
tile's shape), read by a later op (`consumed_later`; in which plans: `read_plans`) or `live`;
the context's repeat cap, LNC, chip and matmul transpose phase; no TensorE stationary loaded
from one of the op's tensors.
Two things are left out of the key:
- the resident bytes in use: an op reads them only to ask whether an output can still become
  resident (`LowerCtx._make_resident`), so a recording is kept with those questions and their
  answers (`_RECORDINGS[key]`: (headroom, recording) pairs) and serves every context that
  answers them alike (a fused window shifted by a few ops often has the same outcome);
- the DMA queue round-robin: the k-th DMA of the op goes to queue (q0 + k) mod the queues, so
  the rows are replayed with their queues shifted (isa/dma/dma_copy.py's cost reads no other
  queue-dependent value).

A recording keeps the rows, their operand accesses with each tensor named by its role (the
op's n-th tensor in HBM, its resident tile, or the k-th tile the op allocated), the op's
allocations and frees in order, and what the op left in the context. Replaying allocates and
frees the same tiles through the builder's allocator (so SBUF peaks and capacity errors are the
rule's), then appends the rows in one `ProgramBuilder.append_rows`: the program is array for
array the one the rule builds. An op whose rule does something a recording cannot carry
(explicit deps or semaphores, a caught capacity error, a builder flush, a tensor outside the
op) runs its rule every time, as do the optimizer rules (they tag tiles with `ctx.ops_done`
and extend `live`).

Recording reads the builder's internals (`_rids`, `_acc`, `_last_stationary`, `_next_queue`,
allocators...): tests/lower/test_replay.py compares whole programs built with and without
replay."""

from __future__ import annotations

from dataclasses import replace
from itertools import accumulate, chain

import numpy as np

from ..errors import CapacityError
from ..program.ap import AccessPattern, Memory, Tensor, _tensor_ids
from . import context as _ctx
from .spec import TensorSpec

REPLAY = True                   # tests turn it off to compare with plain rule runs
# distinct contexts kept: a training step has a few hundred (the demo GPT's two steps: 166,
# 436 KB of arrays, 17 KB the largest), a process with ever-new shapes stays at a few MB
_MAX_RECORDINGS = 1024
_RECORDINGS: dict = {}
_UNRECORDABLE = object()        # a context whose op cannot be recorded: run the rule each time
_MAX_HEADROOMS = 16             # recordings kept per context, each for other headroom answers


def lower_into(ctx, rule, op) -> int:
    """`rule(ctx, op)` then `ctx.end_op()`, or the rows that did in the same context before.
    Returns how many rows the op appended (replayed rows wait in ctx._replayed, appended in
    one go by `flush`, which building the program does first)."""
    b = ctx.b
    key = None
    if REPLAY and not b.reference and b.check_capacity and not b._depth \
            and not rule.__module__.endswith(".optimizer"):
        key = _context(ctx, rule, op)
    rec = None if key is None else _recorded(key[0], ctx._resident_bytes)
    if rec is not None and rec is not _UNRECORDABLE and not b.keep_operands \
            and rec.replay(ctx, key[1]):
        return rec.rec.size
    flush(ctx)
    n0 = len(b)
    if key is not None and rec is None:
        headroom = []               # the rule's _make_resident questions: (bytes, budget, fits)
        made = _record(ctx, rule, op, key[1], headroom)
        if len(_RECORDINGS) >= _MAX_RECORDINGS:
            _RECORDINGS.clear()
        found = _RECORDINGS.setdefault(key[0], [])
        if len(found) >= _MAX_HEADROOMS:
            found.clear()
        found.append((tuple(headroom), made if made is not None else _UNRECORDABLE))
    else:
        rule(ctx, op)
        ctx.end_op()
    return len(b) - n0


def _recorded(key, resident_bytes):
    """The recording (or _UNRECORDABLE) of context `key` whose headroom questions get the same
    answers with `resident_bytes` in use; None when there is none."""
    for headroom, rec in _RECORDINGS.get(key, ()):
        r = resident_bytes
        for nbytes, budget, fits in headroom:       # the rule's own arithmetic, in its order
            if (r + nbytes > budget) == fits:
                break
            if fits:
                r += nbytes
        else:
            return rec
    return None


def flush(ctx) -> None:
    """Append the rows of the ops replayed since the last flush, in one append_rows (the same
    program as one call per op: the rows, accesses and new tensor tracks keep their order)."""
    pending = ctx._replayed
    if not pending:
        return
    ctx._replayed, ctx._replayed_rows = [], 0
    if len(pending) == 1:
        ctx.b.append_rows(*pending[0])
        return
    records, recs = [], []
    for p in pending:
        recs.append(p[1] + len(records))
        records.extend(p[0])
    ctx.b.append_rows(records, np.concatenate(recs), joined_csr([p[2] for p in pending]),
                      np.concatenate([p[3] for p in pending]), joined_csr([p[4] for p in pending]),
                      *(np.concatenate([p[k] for p in pending]) for k in range(5, 10)))


def joined_csr(ptrs):
    """CSR pointers of consecutive runs of rows, as one (few NumPy calls: an eager group joins
    up to 32 runs)."""
    before = np.cumsum([0] + [int(p[-1]) for p in ptrs[:-1]])     # entries of the runs before
    out = np.concatenate([np.zeros(1, np.int64)] + [p[1:] for p in ptrs])
    out[1:] += np.repeat(before, [len(p) - 1 for p in ptrs])
    return out


def _arg_key(a, index, specs):
    """A hashable key of argument `a`: tensors by layout and by which of the op's tensors they
    are (`index`: tensor key -> position, `specs`: one TensorSpec per position, both filled)."""
    cls = a.__class__
    if cls is TensorSpec:
        k = ("id", a.id) if a.id is not None else ("layout",) + a.layout_key   # LowerCtx.key
        j = index.get(k)
        if j is None:
            j = index[k] = len(specs)
            specs.append(a)
        return ("T", a.layout_key, a.on_device, j)
    if cls is tuple or cls is list:
        return (cls,) + tuple([_arg_key(x, index, specs) for x in a])
    if cls is bool or cls is float:     # True == 1 == 1.0 as keys
        return (cls, a)
    return a


def _context(ctx, rule, op):
    """(hashable context key, (the op's tensor keys, one TensorSpec per key)), or None when the
    op must run its rule (a stationary loaded from one of its tensors, a PSUM tile still held,
    an unhashable argument)."""
    b = ctx.b
    if b._psum.blocks or ctx._pool or ctx._outgrown:
        return None
    index, specs = {}, []
    args = _arg_key(op.args, index, specs)
    outs = _arg_key(op.outputs, index, specs)
    keys = list(index)
    resident, hbm, live, later = ctx._resident, ctx._hbm, ctx.live, ctx.consumed_later
    state, grow, own = [], False, set()
    for k in keys:
        r = resident.get(k)
        if r is not None:
            own.add(r.id)
        h = hbm.get(k)
        if h is not None:
            own.add(h.id)
        c = k in later
        grow = grow or (c and r is None)
        state.append((k[0], None if r is None else (r.shape, r.dtype), c,
                      ctx.read_plans.get(k) if c else None, None if live is None else k in live))
    st = b._last_stationary
    if st is not None and st[0].tensor.id in own:
        return None
    key = (rule, op.name, args, outs, tuple(state), grow, ctx._seq % 6, ctx.cap, ctx.lnc,
           ctx.chip.name, _ctx.RULE_CAPS, live is None)
    try:
        hash(key)
    except TypeError:
        return None
    return key, (keys, specs)


class _Shifted:
    """What append_rows reads of an instruction record (its operands left out), with its DMA
    cost as given (the queue moved, for a replay in another round-robin phase)."""
    __slots__ = ("name", "engine", "kind", "ii_cycles", "lat_cycles", "flops", "dma")

    def __init__(self, e, dma):
        self.name, self.engine, self.kind = e.name, e.engine, e.kind
        self.ii_cycles, self.lat_cycles, self.flops, self.dma = (e.ii_cycles, e.lat_cycles,
                                                                 e.flops, dma)


class _Recording:
    __slots__ = ("records", "rec", "x_ptr", "x_idx", "acc_ptr", "acc_label", "write", "box",
                 "pst", "off", "labels", "events", "hbm_made", "made", "resident",
                 "resident_bytes", "q0", "ndma", "seq", "ops_done", "repeats", "blocks",
                 "stationary", "mut", "psum_peak", "_shifted", "_sbuf_after")

    def replay(self, ctx, op_tensors) -> bool:
        """Append the recorded op to ctx. False (nothing changed) when one of its SBUF
        allocations does not fit where the rule's did: the caller then runs the rule."""
        b = ctx.b
        keys, specs = op_tensors
        offsets = self._allocate(b._sbuf)
        if offsets is None:
            return False
        b._psum.peak = max(b._psum.peak, self.psum_peak)
        b._mut += self.mut
        # the op's own tiles: fresh tensor ids (the rows name them by id only); a tile that
        # stays resident, or whose stationary the builder keeps, is a Tensor
        ids = [next(_tensor_ids) for _ in self.made]
        n_res = len(ctx._resident)
        tiles = {}
        for i, j in self.resident:
            tiles[i] = self._tensor(i, offsets, ids, f"res{n_res + len(tiles)}")
        for i, name, shape, dtype in self.hbm_made:
            ids[i] = b.hbm(name, shape, dtype).id
        tid = []
        for kind, j in self.labels:
            if kind == "n":
                tid.append(ids[j])
            elif kind == "r":
                tid.append(ctx._resident[keys[j]].id)
            else:
                tid.append(ctx.hbm(specs[j]).id)
        st = b._last_stationary
        if self.stationary is not None:
            lab, p_start, p_size, offset, dims, p_stride, v = self.stationary
            kind, j = self.labels[lab]
            if kind == "n":
                t = tiles.get(j) or self._tensor(j, offsets, ids, self.made[j][1])
            else:           # writes before the op in this context, then the op's
                t = ctx._resident[keys[j]] if kind == "r" else ctx._hbm[keys[j]]
                flush(ctx)          # (the writes of the rows still waiting counted)
                v += b._versions.get(t.id, 0)
            st = (AccessPattern(t, p_start, p_size, offset, dims, p_stride), v)
        nq = ctx.chip.dma_queues_per_engine
        q = b._next_queue
        if self.rec.size:
            ctx._replayed.append((self._records((q - self.q0) % nq, ctx.chip), self.rec,
                                  self.x_ptr, self.x_idx + (len(b) + ctx._replayed_rows),
                                  self.acc_ptr, np.asarray(tid, np.int64)[self.acc_label],
                                  self.write, self.box, self.pst, self.off))
            ctx._replayed_rows += self.rec.size
        b._next_queue = (q + self.ndma) % nq
        b._last_stationary = st
        for i, j in self.resident:
            ctx._resident[keys[j]] = tiles[i]
            b._tensors.append(tiles[i])
        ctx._resident_bytes += self.resident_bytes
        ctx._seq += self.seq
        ctx.ops_done += self.ops_done
        ctx.repeats.extend(self.repeats)
        ctx._blocks.extend(self.blocks)
        return True

    def _tensor(self, i, offsets, ids, name):
        memory, _name, shape, dtype, p0 = self.made[i]
        t = Tensor(name, memory, shape, dtype, offsets[i] if offsets[i] is not None else 0, p0)
        t.id = ids[i]
        return t

    def _allocate(self, sbuf):
        """The op's SBUF allocations and frees, in order, on the builder's allocator: each
        tile's offset (None for PSUM and HBM), or None (allocator unchanged) when one does not
        fit. The outcome is a function of the allocator's blocks before the op (PSUM is empty
        then and after), so it is kept per starting state."""
        start = tuple(sbuf.blocks)
        hit = self._sbuf_after.get(start)
        if hit is None:
            peak = sbuf.peak
            sbuf.peak = 0
            offsets = [None] * len(self.made)
            try:
                for ev in self.events:
                    if ev[0] == "a":
                        offsets[ev[1]] = sbuf.alloc(ev[2], ev[3])
                    elif ev[0] == "f":
                        sbuf.free(offsets[ev[1]])
            except CapacityError:
                sbuf.blocks[:] = start
                sbuf.peak = peak
                return None
            if len(self._sbuf_after) >= 64:
                self._sbuf_after.clear()
            hit = self._sbuf_after[start] = (tuple(sbuf.blocks), sbuf.peak, offsets)
            sbuf.peak = max(peak, hit[1])
            return offsets
        sbuf.blocks[:] = hit[0]
        sbuf.peak = max(sbuf.peak, hit[1])
        return hit[2]

    def _records(self, shift, chip):
        out = self._shifted.get(shift)
        if out is None:
            nq, epc = chip.dma_queues_per_engine, chip.dma_engines_per_core
            out = []
            for e in self.records:
                d = e.dma
                if d is not None:
                    q = (d.queue + shift) % nq
                    e = _Shifted(e, replace(d, engine0=q % epc, queue=q))
                out.append(e)
            self._shifted[shift] = out
        return out


def _record(ctx, rule, op, op_tensors, headroom):
    """Run the rule (then end_op) watching what it does: its _Recording, or None when the op
    cannot be replayed from one; the headroom questions it asks are appended to `headroom`."""
    b = ctx.b
    keys, _specs = op_tensors
    label = {}                  # tensor id -> ("h"|"r", op tensor) for tensors it starts with
    for j, k in enumerate(keys):
        h, r = ctx._hbm.get(k), ctx._resident.get(k)
        if h is not None:
            label[h.id] = ("h", j)
        if r is not None:
            label[r.id] = ("r", j)
    versions0 = {t: b._versions.get(t, 0) for t in label}
    n0, a0, i0, flushed0, mut0 = len(b._rids), len(b._acc), len(b), b._flushed, b._mut
    q0, seq0, ops0 = b._next_queue, ctx._seq, ctx.ops_done
    rep0, blk0, hbm0 = len(ctx.repeats), len(ctx._blocks), dict(ctx._hbm)
    res0, rb0 = dict(ctx._resident), ctx._resident_bytes
    waits0, signals0, spill0 = len(b._waits), sum(map(len, b._signals.values())), b._spill_bytes
    st0 = b._last_stationary
    emits, events, made, tensors, failed, psum_peak = [], [], {}, [], [], [0]
    append, alloc, hbm, free = b._append, b._alloc, b.hbm, b.free

    def w_append(emit, deps, wait, signal):
        emits.append(emit)
        return append(emit, deps, wait, signal)

    def w_alloc(name, memory, shape, dtype, p0, allocator):
        try:
            t = alloc(name, memory, shape, dtype, p0, allocator)
        except CapacityError:
            failed.append(name)
            raise
        made[t.id] = len(tensors)
        tensors.append(t)
        if memory == Memory.SBUF:
            events.append(("a", made[t.id], t.bytes_per_partition, name))
        else:
            psum_peak[0] = max(psum_peak[0], t.byte_offset + max(1, t.bytes_per_partition))
        return t

    def w_hbm(name, shape, dtype):
        t = hbm(name, shape, dtype)
        made[t.id] = len(tensors)
        tensors.append(t)
        events.append(("h", made[t.id], name, tuple(shape), dtype))
        return t

    def w_free(*ts):
        for t in ts:
            i = made.get(t.id)
            if i is None or t is not tensors[i]:
                failed.append(t)                # not a tile the op allocated
            elif t.memory == Memory.SBUF and not t.freed:
                events.append(("f", i))
        return free(*ts)

    kept = b.keep_operands          # the builder keeps the records itself
    if not kept:
        b._append = w_append
    b._alloc, b.hbm, b.free = w_alloc, w_hbm, w_free
    ctx._headroom = headroom
    try:
        rule(ctx, op)
        ctx.end_op()
    finally:
        del b._alloc, b.hbm, b.free
        ctx._headroom = None
        if not kept:
            del b._append
    # ---- what a recording cannot carry ----
    n = len(b._rids) - n0
    if kept:
        emits = b._emits[n0:]
    if failed or b._flushed != flushed0 or n != len(emits) or len(b._waits) != waits0 \
            or sum(map(len, b._signals.values())) != signals0 or b._spill_bytes != spill0 \
            or ctx._pool or ctx._outgrown or b._psum.blocks \
            or any(ctx._resident.get(k) is not r for k, r in res0.items()) \
            or any(hbm0.get(k, h) is not h for k, h in ctx._hbm.items()):
        return None
    for k, h in ctx._hbm.items():        # HBM tensors the op made for its own tensors: found
        if k not in hbm0:                # by ctx.hbm(spec) when replayed
            if k not in keys or h.id not in made:
                return None
            label[h.id] = ("h", keys.index(k))
    events = [ev for ev in events if ev[0] != "h" or label.get(tensors[ev[1]].id) is None]
    for tid, i in made.items():
        label.setdefault(tid, ("n", i))
    resident = []
    for k, t in ctx._resident.items():
        if k not in res0:
            if k not in keys or t.id not in made:
                return None
            resident.append((made[t.id], keys.index(k)))
    deps = b._deps[n0:]
    if any(d < i0 for x in deps for d in x):
        return None
    nq = ctx.chip.dma_queues_per_engine
    ndma = 0
    for e in emits:
        if e.dma is not None:
            if e.dma.queue != (q0 + ndma) % nq:
                return None
            ndma += 1
    if b._next_queue != (q0 + ndma) % nq:
        return None
    # ---- the rows and their accesses ----
    r = _Recording()
    rows, records, rec = {}, [], []
    table, rids = b._table, b._rids
    for i in range(n):
        row = table[rids[n0 + i]]
        j = rows.get(row)
        if j is None:
            j = rows[row] = len(records)
            e = emits[i]            # (not the record itself: its operands would stay alive)
            records.append(_Shifted(e, e.dma))
        rec.append(j)
    r.records, r.rec, r._shifted, r._sbuf_after = records, np.asarray(rec, np.int64), {}, {}
    r.x_ptr = np.fromiter(accumulate(map(len, deps), initial=0), np.int64, count=n + 1)
    r.x_idx = np.fromiter((d - i0 for x in deps for d in x), np.int64, count=int(r.x_ptr[-1]))
    accs = b._acc[a0:]
    acc = np.fromiter(chain.from_iterable(accs), np.int64, count=8 * len(accs)).reshape(-1, 8)
    r.acc_ptr = np.asarray(b._acc_ptr[n0:], np.int64) - a0
    # each access's tensor as a number of the op's labels, in order of first access (a dict:
    # the op has a few tensors and a few dozen accesses, where np.unique costs ~30 us)
    track_no = {}
    r.acc_label = np.array([track_no.setdefault(a[0], len(track_no)) for a in accs], np.int64)
    labels = [label.get(b._track_tid[t]) for t in track_no]
    if None in labels:
        return None                     # a tensor the op does not own
    r.write, r.box = acc[:, 1].copy(), np.ascontiguousarray(acc[:, 2:6])
    r.pst, r.off = acc[:, 6].copy(), acc[:, 7].copy()
    # ---- the state it leaves ----
    st = b._last_stationary
    if st is st0:
        r.stationary = None
    elif st is None:
        return None         # (no rule clears it without loading another; not worth a case)
    else:
        ap, v = st
        lab = label.get(ap.tensor.id)
        if lab is None:
            return None
        if lab not in labels:
            labels.append(lab)
        if lab[0] != "n":
            v -= versions0.get(ap.tensor.id, 0)
        r.stationary = (labels.index(lab), ap.p_start, ap.p_size, ap.offset, ap.dims,
                        ap.p_stride, v)
    r.made = [(t.memory, t.name, t.shape, t.dtype, t.partition_start) for t in tensors]
    # (a replay makes the op's HBM tensors through the builder, which counts them itself)
    r.mut = b._mut - mut0 - sum(m[0] == Memory.HBM for m in r.made)
    r.labels, r.psum_peak = labels, psum_peak[0]
    r.events = [ev for ev in events if ev[0] != "h"]        # SBUF allocations and frees
    r.hbm_made = [ev[1:] for ev in events if ev[0] == "h"]
    r.resident, r.resident_bytes = resident, ctx._resident_bytes - rb0
    r.q0, r.ndma = q0, ndma
    r.seq, r.ops_done = ctx._seq - seq0, ctx.ops_done - ops0
    r.repeats, r.blocks = ctx.repeats[rep0:], ctx._blocks[blk0:]
    return r
