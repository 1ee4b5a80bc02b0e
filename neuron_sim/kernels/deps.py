"""Automatic dependencies of a whole program in one pass: the rules of `ProgramBuilder._auto`
(neuron_sim/program/builder.py, the specification) over flat arrays of the program's accesses.

Each access is (instruction, tensor track, read or write, box p0, p1, f0, f1), in program order
and, inside one instruction, its reads before its writes (as `_auto` visits them). A read depends
on the live writes its box overlaps; a write on the live reads and writes it overlaps (on another
stream a dependency, on its own stream an order edge for the scheduler) and hides the live
accesses its box covers. Every track keeps its live accesses in a plain list scanned in full: the
same answers as the builder's indexed lists (`_Accesses`), without their Python overhead."""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.typed import List

from . import drop_stale_caches


@njit(cache=True, inline="always")
def _push(buf, n, x):
    """Append x to a growable int64 buffer holding n values; returns the (maybe new) buffer."""
    if n == buf.shape[0]:
        new = np.empty(2 * n + 8, np.int64)
        new[:n] = buf[:n]
        buf = new
    buf[n] = x
    return buf


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
def _bisect(lst, n, box, key, right):
    """First position in lst[:n] (sorted by box[., 2]) whose start is > key (right) or >= key."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        v = box[lst[mid], 2]
        if v < key or (right and v == key):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def _insert(lst, n, box, a):
    """Insert access a into lst[:n] after the entries with the same start; returns the list."""
    if n == lst.shape[0]:
        new = np.empty(2 * n + 8, np.int64)
        new[:n] = lst[:n]
        lst = new
    k = _bisect(lst, n, box, box[a, 2], True)
    for j in range(n, k, -1):
        lst[j] = lst[j - 1]
    lst[k] = a
    return lst


@njit(cache=True)
def _auto_deps(n, stream, acc_ptr, acc_track, acc_write, box, n_tracks, x_ptr, x_idx):
    """Returns (dep_ptr, dep_idx, ord_ptr, ord_idx): per instruction the sorted union of its
    explicit deps (x_ptr/x_idx) and its automatic ones, and its same-stream order edges that are
    not already dependencies."""
    live = List()
    for _ in range(2 * n_tracks):                 # 2t: live reads of track t, 2t+1: live writes
        live.append(np.empty(4, np.int64))
    count = np.zeros(2 * n_tracks, np.int64)
    longest = np.zeros(2 * n_tracks, np.int64)
    acc_instr = np.empty(acc_track.shape[0], np.int64)
    # An access is only ever looked at by later accesses of its track (a read by writes, a write
    # by both): the last ones of a track, e.g. every read of an input never written, are not
    # kept. Dropping them changes no answer and keeps the live lists short.
    last_any = np.full(n_tracks, -1, np.int64)
    last_write = np.full(n_tracks, -1, np.int64)
    for a in range(acc_track.shape[0]):
        last_any[acc_track[a]] = a
        if acc_write[a]:
            last_write[acc_track[a]] = a
    dep_ptr = np.zeros(n + 1, np.int64)
    ord_ptr = np.zeros(n + 1, np.int64)
    dep_idx = np.empty(max(n, 8), np.int64)
    ord_idx = np.empty(8, np.int64)
    nd = no = 0
    d = np.empty(16, np.int64)
    o = np.empty(16, np.int64)
    for i in range(n):
        s = stream[i]
        kd = ko = 0
        for j in range(x_ptr[i], x_ptr[i + 1]):
            d = _push(d, kd, x_idx[j])
            kd += 1
        for a in range(acc_ptr[i], acc_ptr[i + 1]):
            acc_instr[a] = i
            t = acc_track[a]
            p0, p1, f0, f1 = box[a, 0], box[a, 1], box[a, 2], box[a, 3]
            if acc_write[a] == 0:
                k = 2 * t + 1
                w_list = live[k]
                lo = _bisect(w_list, count[k], box, f0 - longest[k], True)
                hi = _bisect(w_list, count[k], box, f1, False)
                for q in range(lo, hi):
                    e = w_list[q]
                    if p0 < box[e, 1] and box[e, 0] < p1 and f0 < box[e, 3] and box[e, 2] < f1:
                        d = _push(d, kd, acc_instr[e])
                        kd += 1
            else:
                for side in range(2):
                    k = 2 * t + side
                    lst = live[k]
                    n_k = count[k]
                    lo = _bisect(lst, n_k, box, f0 - longest[k], True)
                    hi = _bisect(lst, n_k, box, f1, False)
                    keep = lo
                    for q in range(lo, hi):
                        e = lst[q]
                        if p0 < box[e, 1] and box[e, 0] < p1 and f0 < box[e, 3] and box[e, 2] < f1:
                            w = acc_instr[e]
                            if w != i:
                                if stream[w] != s:
                                    d = _push(d, kd, w)
                                    kd += 1
                                else:
                                    o = _push(o, ko, w)
                                    ko += 1
                        if not (p0 <= box[e, 0] and box[e, 1] <= p1
                                and f0 <= box[e, 2] and box[e, 3] <= f1):
                            lst[keep] = e
                            keep += 1
                    if keep != hi:                # close the gap the pruned entries left
                        for q in range(hi, n_k):
                            lst[keep + q - hi] = lst[q]
                        count[k] = n_k - (hi - keep)
            if a >= (last_any[t] if acc_write[a] else last_write[t]):
                continue
            k = 2 * t + acc_write[a]
            live[k] = _insert(live[k], count[k], box, a)
            count[k] += 1
            if f1 - f0 > longest[k]:
                longest[k] = f1 - f0
        kd = _sort_unique(d, kd)
        for q in range(kd):
            dep_idx = _push(dep_idx, nd, d[q])
            nd += 1
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
                ord_idx = _push(ord_idx, no, x)
                no += 1
        ord_ptr[i + 1] = no
    return dep_ptr, dep_idx[:nd].copy(), ord_ptr, ord_idx[:no].copy()


drop_stale_caches(globals())
