"""Automatic dependencies of a whole program in one pass: the rules of `ProgramBuilder._auto`
(neuron_sim/program/builder.py, the specification) over flat arrays of the program's accesses.

Each access is (instruction, tensor track, read or write, box p0, p1, f0, f1), in program order
and, inside one instruction, its reads before its writes (as `_auto` visits them). A read depends
on the live writes its box overlaps; a write on the live reads and writes it overlaps (on another
stream a dependency, on its own stream an order edge for the scheduler) and hides the live
accesses its box covers. Every track keeps its live accesses indexed by the start of their free
range, as the builder's `_Accesses` does (a sorted run, plus a short unsorted tail of the newest
entries merged into it when full), and keeps no access that no later access of its track will
look at: the same answers as the reference, without its Python overhead."""

from __future__ import annotations

import numpy as np
from numba import njit

from . import drop_stale_caches


@njit(cache=True)
def _grown(buf, n, need):
    """buf (holding n values) copied into a buffer of at least `need` (called only to grow)."""
    new = np.empty(max(2 * need, 8), np.int64)
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
def _bisect(store, s0, n, box, key, right):
    """First position p in 0..n of the run store[s0:s0+n] (sorted by box[., 2]) whose start is
    > key (right) or >= key."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        v = box[store[s0 + mid], 2]
        if v < key or (right and v == key):
            lo = mid + 1
        else:
            hi = mid
    return lo


# A live list is a sorted run followed by an unsorted tail of up to TAIL newer entries, merged
# into the run when full: inserting into the middle of a long sorted list moved ~75 entries per
# access on C8 (most of the pass's time).
TAIL = 16


@njit(cache=True, inline="always")
def _overlap(box, e, p0, p1, f0, f1):
    return p0 < box[e, 1] and box[e, 0] < p1 and f0 < box[e, 3] and box[e, 2] < f1


@njit(cache=True, inline="always")
def _covers(box, e, p0, p1, f0, f1):
    return p0 <= box[e, 0] and box[e, 1] <= p1 and f0 <= box[e, 2] and box[e, 3] <= f1


@njit(cache=True)
def _merge_tail(store, s0, n, t, box, scratch):
    """Sort the tail store[s0+n:s0+n+t] by start and merge it into the run store[s0:s0+n]."""
    for j in range(t):
        scratch[j] = store[s0 + n + j]
    for j in range(1, t):                          # insertion sort of the tail
        x = scratch[j]
        q = j - 1
        while q >= 0 and box[scratch[q], 2] > box[x, 2]:
            scratch[q + 1] = scratch[q]
            q -= 1
        scratch[q + 1] = x
    a, b, w = n - 1, t - 1, n + t - 1              # merge from the back
    while b >= 0:
        if a >= 0 and box[store[s0 + a], 2] > box[scratch[b], 2]:
            store[s0 + w] = store[s0 + a]
            a -= 1
        else:
            store[s0 + w] = scratch[b]
            b -= 1
        w -= 1


@njit(cache=True)
def _auto_deps(n, stream, acc_ptr, acc_track, acc_write, box, n_tracks, x_ptr, x_idx):
    """Returns (dep_ptr, dep_idx, ord_ptr, ord_idx): per instruction the sorted union of its
    explicit deps (x_ptr/x_idx) and its automatic ones, and its same-stream order edges that are
    not already dependencies."""
    # Live lists, 2t: the reads of track t, 2t+1: its writes; list k is the run of `count[k]`
    # sorted entries then `tail[k]` newer ones from store[start[k]], room for cap[k] in all.
    n_lists = 2 * n_tracks
    store = np.empty(64 * n_lists + 64, np.int64)
    start = np.arange(n_lists, dtype=np.int64) * 64
    cap = np.full(n_lists, 64, np.int64)
    used = 64 * n_lists
    count = np.zeros(n_lists, np.int64)
    tail = np.zeros(n_lists, np.int64)
    longest = np.zeros(n_lists, np.int64)
    scratch = np.empty(TAIL, np.int64)
    n_acc = acc_track.shape[0]
    acc_instr = np.empty(n_acc, np.int64)
    # An access is only ever looked at by later accesses of its track (a read by writes, a write
    # by both): the last ones of a track, e.g. every read of an input never written, are not
    # kept. Dropping them changes no answer and keeps the live lists short.
    last_any = np.full(n_tracks, -1, np.int64)
    last_write = np.full(n_tracks, -1, np.int64)
    for a in range(n_acc):
        last_any[acc_track[a]] = a
        if acc_write[a]:
            last_write[acc_track[a]] = a
    # This loop calls no helper that returns an array: numba counts references on every array
    # passed back, which cost more than the work itself (the buffers grow in place instead).
    # d and o: one instruction's dependencies and order edges.
    d = np.empty(64, np.int64)
    o = np.empty(64, np.int64)
    dep_ptr = np.zeros(n + 1, np.int64)
    ord_ptr = np.zeros(n + 1, np.int64)
    dep_idx = np.empty(max(n, 8), np.int64)
    ord_idx = np.empty(max(n // 4, 8), np.int64)
    nd = no = 0
    for i in range(n):
        s = stream[i]
        kd = ko = 0
        if x_ptr[i + 1] - x_ptr[i] > d.shape[0]:
            d = _grown(d, 0, x_ptr[i + 1] - x_ptr[i])
        for j in range(x_ptr[i], x_ptr[i + 1]):
            d[kd] = x_idx[j]
            kd += 1
        for a in range(acc_ptr[i], acc_ptr[i + 1]):
            acc_instr[a] = i
            t = acc_track[a]
            wr = acc_write[a]
            p0, p1, f0, f1 = box[a, 0], box[a, 1], box[a, 2], box[a, 3]
            for side in range(1 - wr, 2):         # a read looks at writes; a write at both
                k = 2 * t + side
                s0, n_k, t_k = start[k], count[k], tail[k]
                lo = _bisect(store, s0, n_k, box, f0 - longest[k], True)
                hi = _bisect(store, s0, n_k, box, f1, False)
                n_win = hi - lo
                dropped = dropped_run = 0
                for step in range(n_win + t_k):   # the run inside the window, then the tail
                    q = s0 + (lo + step if step < n_win else n_k + step - n_win)
                    e = store[q]
                    if _overlap(box, e, p0, p1, f0, f1):
                        w = acc_instr[e]
                        if wr == 0 or (w != i and stream[w] != s):
                            if kd == d.shape[0]:
                                d = _grown(d, kd, kd + 1)
                            d[kd] = w
                            kd += 1
                        elif w != i:
                            if ko == o.shape[0]:
                                o = _grown(o, ko, ko + 1)
                            o[ko] = w
                            ko += 1
                    if wr and _covers(box, e, p0, p1, f0, f1):
                        store[q] = -1             # hidden by this write
                        dropped += 1
                        if step < n_win:
                            dropped_run += 1
                if dropped:                       # close the gaps
                    keep = s0 + lo
                    for q in range(s0 + lo, s0 + n_k + t_k):
                        if store[q] >= 0:
                            store[keep] = store[q]
                            keep += 1
                    count[k] = n_k - dropped_run
                    tail[k] = t_k - (dropped - dropped_run)
            if a >= (last_any[t] if wr else last_write[t]):
                continue
            k = 2 * t + wr
            n_k, t_k = count[k], tail[k]
            if n_k + t_k == cap[k]:               # full: move the list to the end, twice as big
                if used + 2 * cap[k] > store.shape[0]:
                    store = _grown(store, used, used + 2 * cap[k])
                store[used:used + n_k + t_k] = store[start[k]:start[k] + n_k + t_k]
                start[k] = used
                cap[k] *= 2
                used += cap[k]
            store[start[k] + n_k + t_k] = a
            t_k += 1
            if t_k == TAIL:
                _merge_tail(store, start[k], n_k, t_k, box, scratch)
                n_k += t_k
                t_k = 0
            count[k], tail[k] = n_k, t_k
            if f1 - f0 > longest[k]:
                longest[k] = f1 - f0
        kd = _sort_unique(d, kd)
        if nd + kd > dep_idx.shape[0]:
            dep_idx = _grown(dep_idx, nd, nd + kd)
        dep_idx[nd:nd + kd] = d[:kd]
        nd += kd
        dep_ptr[i + 1] = nd
        if ko:
            ko = _sort_unique(o, ko)
            if no + ko > ord_idx.shape[0]:
                ord_idx = _grown(ord_idx, no, no + ko)
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
    return dep_ptr, dep_idx[:nd].copy(), ord_ptr, ord_idx[:no].copy()


drop_stale_caches(globals())
