"""Automatic dependencies of a whole program in one pass: the rules of `ProgramBuilder._auto`
(neuron_sim/program/builder.py, the specification) over flat arrays of the program's accesses.

Each access is (instruction, tensor track, read or write, box p0, p1, f0, f1), in program order
and, inside one instruction, its reads before its writes (as `_auto` visits them). A read depends
on the live writes its box overlaps; a write on the live reads and writes it overlaps (on another
stream a dependency, on its own stream an order edge for the scheduler) and hides the live
accesses its box covers. Every track keeps its live accesses indexed by the start of their free
range (a sorted run, plus a short unsorted tail of the newest entries merged into it when full):
a query looks only at the entries that start within the longest live free range before it. No
access is kept that no later access of its track will look at: the same answers as the
reference, which checks every live entry, without its cost."""

from __future__ import annotations

import numpy as np
from numba import njit

from . import drop_stale_caches, without_refcounting


@njit(cache=True)
def _grown(buf, n, need):
    """buf (its first n values or rows used) copied into one of 2 * need (called only to grow,
    for `need` more than it holds)."""
    new = np.empty((2 * need,) + buf.shape[1:], np.int64)
    new[:n] = buf[:n]
    return new


@njit(cache=True, inline="always")
def _sort_unique(buf, n):
    """Sort buf[:n] in place (insertion sort: an instruction has a handful of dependencies) and
    drop repeats; returns how many values remain."""
    for j in range(1, n):
        x = buf[j]
        q = j - 1
        while q >= 0 and buf[q] > x:
            buf[q + 1] = buf[q]
            q -= 1
        buf[q + 1] = x
    k = 0
    for j in range(n):
        if k == 0 or buf[j] != buf[k - 1]:
            buf[k] = buf[j]
            k += 1
    return k


@njit(cache=True, inline="always")
def _bisect(store, s0, n, key, right):
    """First position p in 0..n of the run store[s0:s0+n] (sorted by f0) whose f0 is > key
    (right) or >= key."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        v = store[s0 + mid, F0]
        if v < key or (right and v == key):
            lo = mid + 1
        else:
            hi = mid
    return lo


# A live list is a sorted run followed by an unsorted tail of up to TAIL newer entries, merged
# into the run when full: inserting into the middle of a long sorted list moved ~75 entries per
# access on C8 (most of the pass's time). 32, not 16: half the merges (each moves most of a
# run of ~200 reads of a block) for a longer scan of the tail (C8's pass 31 -> 24 ms, min of 11).
TAIL = 32
# The columns of a live entry: its instruction (HIDDEN once a write covers it, until the list is
# compacted) and its box, copied there so a search or scan reads one row per entry.
INSTR, P0, P1, F0, F1 = 0, 1, 2, 3, 4
HIDDEN = -1


@njit(cache=True, inline="always")
def _copy_row(dst, q, src, r):
    for c in range(5):
        dst[q, c] = src[r, c]


@njit(cache=True, inline="always")
def _merge_tail(store, s0, n, t, scratch):
    """Sort the tail store[s0+n:s0+n+t] by f0 and merge it into the run store[s0:s0+n]."""
    # insertion sort of the tail's row numbers (scratch's last column; stable), then one copy of
    # each row into scratch: sorting the rows themselves moved all five columns at every step
    order = scratch[:, 5]
    for j in range(t):
        x = s0 + n + j
        key = store[x, F0]
        q = j - 1
        while q >= 0 and store[order[q], F0] > key:
            order[q + 1] = order[q]
            q -= 1
        order[q + 1] = x
    for j in range(t):
        _copy_row(scratch, j, store, order[j])
    a, b, w = n - 1, t - 1, n + t - 1              # merge from the back
    while b >= 0:
        if a >= 0 and store[s0 + a, F0] > scratch[b, F0]:
            _copy_row(store, s0 + w, store, s0 + a)
            a -= 1
        else:
            _copy_row(store, s0 + w, scratch, b)
            b -= 1
        w -= 1


@njit(cache=True, inline="always")
def _compact(store, s0, k, count, tail):
    """Drop the hidden entries of list k (its run stays sorted, its tail follows it)."""
    n_k, t_k = count[k], tail[k]
    keep = s0
    for q in range(s0, s0 + n_k + t_k):
        if q == s0 + n_k:
            count[k] = keep - s0
        if store[q, INSTR] != HIDDEN:
            if keep != q:
                _copy_row(store, keep, store, q)
            keep += 1
    if t_k == 0:
        count[k] = keep - s0
    tail[k] = keep - s0 - count[k]


# What _pass keeps between calls, in `pos` and in `lists` (rows), so it can stop for room and go on
I_NEXT, USED, N_DEP, N_ORD, NEED_ROWS, NEED_D = 0, 1, 2, 3, 4, 5
START, CAP, COUNT, TAILN, N_HIDDEN, LONGEST = 0, 1, 2, 3, 4, 5


@njit(cache=True)
def _auto_deps(n, stream, acc_ptr, acc_track, acc_write, box, n_tracks, x_ptr, x_idx):
    """Returns (dep_ptr, dep_idx, ord_ptr, ord_idx): per instruction the sorted union of its
    explicit deps (x_ptr/x_idx) and its automatic ones, and its same-stream order edges that are
    not already dependencies. Allocates the buffers; _pass fills them, and stops before an
    instruction that might not fit for them to be grown."""
    # Live lists, 2t: the reads of track t, 2t+1: its writes; list k is the run of
    # lists[COUNT, k] sorted entries then lists[TAILN, k] newer ones from store[lists[START, k]],
    # room for lists[CAP, k] in all.
    n_lists = 2 * n_tracks
    lists = np.zeros((6, n_lists), np.int64)
    for k in range(n_lists):
        lists[START, k] = 64 * k
        lists[CAP, k] = 64
    store = np.empty((64 * n_lists + 64, 5), np.int64)
    n_acc = acc_track.shape[0]
    # An access is only ever looked at by later accesses of its track (a read by writes, a write
    # by both): the last ones of a track, e.g. every read of an input never written, are not
    # kept. Dropping them changes no answer and keeps the live lists short.
    last_any = np.full(n_tracks, -1, np.int64)
    last_write = np.full(n_tracks, -1, np.int64)
    for a in range(n_acc):
        last_any[acc_track[a]] = a
        if acc_write[a]:
            last_write[acc_track[a]] = a
    pos = np.zeros(6, np.int64)
    pos[USED] = 64 * n_lists
    d = np.empty(64, np.int64)         # one instruction's dependencies and order edges
    o = np.empty(64, np.int64)
    dep_ptr = np.zeros(n + 1, np.int64)
    ord_ptr = np.zeros(n + 1, np.int64)
    # Room for more entries than programs need (C8: 3.2 deps per instruction): pages never
    # written are never touched, and a first touch costs more than the copy a regrowth makes
    dep_idx = np.empty(max(8 * n + x_idx.shape[0], 64), np.int64)
    ord_idx = np.empty(max(2 * n, 64), np.int64)
    scratch = np.empty((TAIL, 6), np.int64)         # a tail's rows, then their order
    while _pass(n, stream, acc_ptr, acc_track, acc_write, box, x_ptr, x_idx, last_any,
                last_write, lists, store, pos, d, o, dep_ptr, dep_idx, ord_ptr, ord_idx,
                scratch):
        if pos[NEED_ROWS] > store.shape[0]:
            store = _grown(store, pos[USED], pos[NEED_ROWS])
        if pos[NEED_D] > d.shape[0]:
            d = np.empty(2 * pos[NEED_D], np.int64)
            o = np.empty(2 * pos[NEED_D], np.int64)
        if pos[N_DEP] + pos[NEED_D] > dep_idx.shape[0]:
            dep_idx = _grown(dep_idx, pos[N_DEP], pos[N_DEP] + pos[NEED_D])
        if pos[N_ORD] + pos[NEED_D] > ord_idx.shape[0]:
            ord_idx = _grown(ord_idx, pos[N_ORD], pos[N_ORD] + pos[NEED_D])
    return dep_ptr, dep_idx[:pos[N_DEP]], ord_ptr, ord_idx[:pos[N_ORD]]


@njit(cache=True, **without_refcounting())
def _pass(n, stream, acc_ptr, acc_track, acc_write, box, x_ptr, x_idx, last_any, last_write,
          lists, store, pos, d, o, dep_ptr, dep_idx, ord_ptr, ord_idx, scratch):
    """The pass from instruction pos[I_NEXT] on; returns False when done, True when it stopped
    before an instruction that might not fit the buffers (pos[NEED_ROWS], pos[NEED_D] say how
    much they need). It allocates nothing, so it runs without numba's reference counting (two
    atomic operations per array a helper touches: ~2/3 of the pass's time with them)."""
    start, cap, count, tail = lists[START], lists[CAP], lists[COUNT], lists[TAILN]
    n_hidden, longest = lists[N_HIDDEN], lists[LONGEST]
    used, nd, no = pos[USED], pos[N_DEP], pos[N_ORD]
    for i in range(pos[I_NEXT], n):
        # room first: at most every live entry of the lists its accesses look at, plus its
        # explicit deps; a list grows at most once per instruction (caps >= 64 > its accesses)
        bound = x_ptr[i + 1] - x_ptr[i] + acc_ptr[i + 1] - acc_ptr[i]
        rows = used
        for a in range(acc_ptr[i], acc_ptr[i + 1]):
            t = acc_track[a]
            for side in range(1 - acc_write[a], 2):
                bound += count[2 * t + side] + tail[2 * t + side]
            rows += 2 * cap[2 * t + acc_write[a]]
        if rows > store.shape[0] or bound > d.shape[0] or nd + bound > dep_idx.shape[0] \
                or no + bound > ord_idx.shape[0]:
            pos[I_NEXT], pos[USED], pos[N_DEP], pos[N_ORD] = i, used, nd, no
            pos[NEED_ROWS], pos[NEED_D] = rows, bound
            return True
        s = stream[i]
        kd = ko = 0
        for j in range(x_ptr[i], x_ptr[i + 1]):
            d[kd] = x_idx[j]
            kd += 1
        for a in range(acc_ptr[i], acc_ptr[i + 1]):
            t = acc_track[a]
            wr = acc_write[a]
            p0, p1, f0, f1 = box[a, 0], box[a, 1], box[a, 2], box[a, 3]
            for side in range(1 - wr, 2):         # a read looks at writes; a write at both
                k = 2 * t + side
                s0, n_k, t_k = start[k], count[k], tail[k]
                # the run inside the window (from the first entry that may reach f0 to the
                # first that starts at or after f1: one search, the end found by the scan),
                # then the tail
                q = s0 + _bisect(store, s0, n_k, f0 - longest[k], True)
                run_end = s0 + n_k
                end = run_end + t_k
                hid = 0
                while q < end:
                    if q < run_end and store[q, F0] >= f1:
                        q = run_end
                        continue
                    w = store[q, INSTR]
                    if w != HIDDEN:
                        e0, e1, e2, e3 = store[q, P0], store[q, P1], store[q, F0], store[q, F1]
                        if p0 < e1 and e0 < p1 and f0 < e3 and e2 < f1:       # overlap
                            if wr == 0 or (w != i and stream[w] != s):
                                d[kd] = w
                                kd += 1
                            elif w != i:
                                o[ko] = w
                                ko += 1
                        if wr and p0 <= e0 and e1 <= p1 and f0 <= e2 and e3 <= f1:   # covers
                            store[q, INSTR] = HIDDEN
                            hid += 1
                    q += 1
                if hid:
                    n_hidden[k] += hid
                    if 2 * n_hidden[k] > n_k + t_k:
                        _compact(store, s0, k, count, tail)
                        n_hidden[k] = 0
            if a >= (last_any[t] if wr else last_write[t]):
                continue
            k = 2 * t + wr
            n_k, t_k = count[k], tail[k]
            if n_k + t_k == cap[k] and n_hidden[k]:
                _compact(store, start[k], k, count, tail)
                n_hidden[k] = 0
                n_k, t_k = count[k], tail[k]
            if n_k + t_k == cap[k]:               # full: move the list to the end, twice as big
                for q in range(n_k + t_k):
                    _copy_row(store, used + q, store, start[k] + q)
                start[k] = used
                cap[k] *= 2
                used += cap[k]
            q = start[k] + n_k + t_k
            store[q, INSTR], store[q, P0], store[q, P1], store[q, F0], store[q, F1] = \
                i, p0, p1, f0, f1
            t_k += 1
            if t_k == TAIL:
                _merge_tail(store, start[k], n_k, t_k, scratch)
                n_k += t_k
                t_k = 0
            count[k], tail[k] = n_k, t_k
            if f1 - f0 > longest[k]:
                longest[k] = f1 - f0
        kd = _sort_unique(d, kd)
        for r in range(kd):
            dep_idx[nd + r] = d[r]
        nd += kd
        dep_ptr[i + 1] = nd
        if ko:
            ko = _sort_unique(o, ko)
            q = 0
            for r in range(ko):                   # order edges minus dependencies (both sorted)
                x = o[r]
                while q < kd and d[q] < x:
                    q += 1
                if q < kd and d[q] == x:
                    continue
                ord_idx[no] = x
                no += 1
        ord_ptr[i + 1] = no
    pos[I_NEXT], pos[USED], pos[N_DEP], pos[N_ORD] = n, used, nd, no
    return False


drop_stale_caches(globals())
