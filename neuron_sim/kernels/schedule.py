"""The scheduling pass as a flat numba kernel: which order each engine's queue runs its
instructions in, decided before timing as the Neuron compiler does.

List scheduling over the dependency graph with the timing model's costs: every stream (engine
sequencer or DMA queue) looks at a window of its first `window[s]` not-yet-scheduled
instructions in program order and issues the one that can start earliest (ties: program
order), so an instruction waiting on a dependent-instruction latency, a semaphore or a DMA lets
an independent one of a later loop iteration go first. What it may not move past:
- data dependencies (dep_ptr/dep_idx: RAW across and within engines, WAR/WAW across engines,
  buffer reuse and semaphore waits), and
- same-stream write-after-read/write ordering (ord_ptr/ord_idx), which the in-order timing
  engine gets for free from program order and a reordering pass must keep explicitly.
A window of 1 keeps program order (TensorE: a LoadStationary is skipped when the same
stationary is still loaded, which is decided in program order).

Dependencies are scanned, start times found and resources (DMA engines, the HBM share, TensorE's
stationary buffer and dI/dt throttle) claimed by the timing kernel's own helpers (timing.py), so
the in-order timing run of the order this pass returns reproduces the times the pass saw.
`_list_schedule.py_func` is the same pass in plain Python (the benchmark's reference)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .timing import KIND_LS, KIND_MM, MACHINE0, _earliest, _issue, _scan_deps, _stream_order


@njit(cache=True, inline="always")
def _fill(s, window, wn, fillp, sptr, order0, win, wr, wpos, wblk, dep_ptr):
    """Append stream s's next instruction in program order to its window if there is room."""
    w = window[s] if window[s] > 0 else 1
    if wn[s] >= w or fillp[s] >= sptr[s + 1]:
        return False
    i = order0[fillp[s]]
    k = wn[s]
    win[s, k] = i
    wr[s, k] = 0.0
    wpos[s, k] = dep_ptr[i]
    wblk[s, k] = -2                 # not scanned yet
    wn[s] += 1
    fillp[s] += 1
    return True


@njit(cache=True, error_model="numpy")
def _list_schedule(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns,
                   issue_ns, n_eng, eng0, params, window):
    """Returns (status, order, sptr): per stream s, order[sptr[s]:sptr[s+1]] is the issue order.
    status -1: nothing can issue (a dependency cycle through the windows)."""
    sem_lat = params[0]
    n_dma = int(params[5])
    n_streams = int(params[6])
    n = stream.shape[0]
    order0, sptr = _stream_order(stream, n_streams)
    W = 1
    for s in range(n_streams):
        if window[s] > W:
            W = window[s]
    win = np.full((n_streams, W), -1, np.int64)    # window slots, program order
    wr = np.zeros((n_streams, W))                   # dependency-ready time (partial while blocked)
    wpos = np.zeros((n_streams, W), np.int64)       # where the slot's dependency scan stands
    wblk = np.full((n_streams, W), -1, np.int64)    # what a blocked slot waits for (-1: ready)
    wn = np.zeros(n_streams, np.int64)
    fillp = sptr[:-1].copy()
    outp = sptr[:-1].copy()
    out = np.empty(n, np.int64)
    end = np.zeros(n)
    done = np.zeros(n, np.bool_)
    waiters = np.zeros(n, np.int64)                 # bit s: a slot of stream s waits for i
    free = np.zeros(n_streams)
    dma_free = np.zeros(n_dma)
    m = MACHINE0
    cand = np.full(n_streams, np.inf)
    cslot = np.zeros(n_streams, np.int64)
    dirty = np.zeros(n_streams, np.bool_)
    for s in range(n_streams):
        while _fill(s, window, wn, fillp, sptr, order0, win, wr, wpos, wblk, dep_ptr):
            pass
        dirty[s] = wn[s] > 0
    remaining = n
    while remaining > 0:
        for s in range(n_streams):
            if not dirty[s]:
                continue
            dirty[s] = False
            best = np.inf
            bk = -1
            for k in range(wn[s]):
                i = win[s, k]
                b = wblk[s, k]
                if b != -1:
                    if b >= 0 and not done[b]:
                        continue
                    # (resume) the dependency scan, then the same-stream order edges
                    r, p, blocker = _scan_deps(i, wpos[s, k], wr[s, k], s, dep_ptr, dep_idx,
                                               done, end, stream, sem_lat)
                    if blocker < 0:
                        for q in range(ord_ptr[i], ord_ptr[i + 1]):
                            if not done[ord_idx[q]]:
                                blocker = ord_idx[q]
                                break
                    wr[s, k] = r
                    wpos[s, k] = p
                    wblk[s, k] = blocker
                    if blocker >= 0:
                        waiters[blocker] |= np.int64(1) << s
                        continue
                c = _earliest(kind[i], wr[s, k], free[s], m)
                if c < best:
                    best = c
                    bk = k
                    if c <= free[s]:
                        break       # nothing later in the window can start earlier
            cand[s] = best
            cslot[s] = bk
        best_s = -1
        best_t = np.inf
        for s in range(n_streams):
            if cand[s] < best_t:
                best_t = cand[s]
                best_s = s
        if best_s < 0:
            return -1, out, sptr
        s = best_s
        k = cslot[s]
        i = win[s, k]
        for q in range(k, wn[s] - 1):
            win[s, q] = win[s, q + 1]
            wr[s, q] = wr[s, q + 1]
            wpos[s, q] = wpos[s, q + 1]
            wblk[s, q] = wblk[s, q + 1]
        wn[s] -= 1
        _fill(s, window, wn, fillp, sptr, order0, win, wr, wpos, wblk, dep_ptr)
        out[outp[s]] = i
        outp[s] += 1
        remaining -= 1
        dirty[s] = True
        cand[s] = np.inf
        free[s], end[i], _, _, m = _issue(
            kind[i], best_t, ii[i], lat[i], eng_ns[i], hbm_ns[i], issue_ns[i], n_eng[i], eng0[i],
            free[s], params, dma_free, m)
        if kind[i] == KIND_LS or kind[i] == KIND_MM:
            dirty[0] = True     # the LS/MM state feeds TensorE's next start
        done[i] = True
        bits = waiters[i]
        if bits != 0:
            s2 = 0
            while bits != 0:
                if bits & 1:
                    dirty[s2] = True
                bits >>= 1
                s2 += 1
            waiters[i] = 0
    return 0, out, sptr
