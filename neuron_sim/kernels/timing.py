"""The timing model as a flat numba kernel: arrays and scalars in, arrays out, no validation.
Same model and same arithmetic as neuron_sim/timing/reference.py (the specification), plus
book-keeping that cannot change results: each stream's earliest start is cached until something
it depends on changes, and a head's dependency scan resumes where it stopped.
The dependency scan, the earliest start and the issue of one instruction (`_scan_deps`,
`_earliest`, `_issue`) also serve the scheduling pass (schedule.py), so that it claims resources
exactly as this kernel does. Compiled once and cached on disk (cache=True)."""

from __future__ import annotations

import numpy as np
from numba import njit

from . import Scratch, drop_stale_caches
from .indexing import skip_wraparound

skip_wraparound(__name__)   # no negative indexes here: see indexing.py

KIND_LS, KIND_MM, KIND_DMA = 1, 2, 3

# The machine's scalar state between instructions, one tuple that _issue takes and returns (it
# stays in registers; an array would be re-read after every store): (TensorE's LoadStationary
# slot free, its last LoadStationary end, last MultiplyMoving start, PE busy end, dI/dt burst
# start, HBM share free, 1.0 while every DMA engine is free at one time (dma_free is stale then),
# that time).
MACHINE0 = (0.0, 0.0, 0.0, -np.inf, 0.0, 0.0, 1.0, 0.0)


@njit(cache=True)
def _stream_order(stream, n_streams, order):
    """_stream_fill's (order, sptr) for `stream`, order given (filled)."""
    counts = np.zeros(n_streams + 1, np.int64)
    for i in range(stream.shape[0]):
        counts[stream[i] + 1] += 1
    return _stream_fill(stream, counts, order)


@njit(cache=True)
def _stream_fill(stream, counts, order):
    """Each stream's instructions in program order, as CSR by stream (order, sptr), given
    counts[s + 1] = how many stream s has (made sptr in place); order is filled."""
    n = stream.shape[0]
    n_streams = counts.shape[0] - 1
    for s in range(n_streams):
        counts[s + 1] += counts[s]
    fill = counts[:-1].copy()
    for i in range(n):
        s = stream[i]
        order[fill[s]] = i
        fill[s] += 1
    return order, counts


@njit(cache=True, inline="always", error_model="numpy")
def _scan_deps(i, p, r, s, dep_ptr, dep_idx, done, end, stream, sem_lat):
    """Scan instruction i's dependencies from position p, r the latest end seen so far (plus the
    semaphore latency across streams). Returns (r, p, -1) when all are done, else (partial r,
    the position, an instruction not done). done None (the scheduling pass): an instruction's
    end is NaN until it issues, one array read per dependency instead of two scattered ones."""
    while p < dep_ptr[i + 1]:
        d = dep_idx[p]
        if done is None:
            t = end[d]
            if np.isnan(t):
                # wait for the last dependency instead when it is not done either and on the
                # same stream as d: any one not done will do (the scan resumes at p after each
                # wake until all are done), and the last (the latest in program order: the
                # builder sorts them) is then most often the last to issue: a DMA that waits
                # for the ~32 matmuls reading its buffer is woken once, not 32 times
                q = dep_ptr[i + 1] - 1
                if q > p:
                    dl = dep_idx[q]
                    if np.isnan(end[dl]) and stream[dl] == stream[d]:
                        return r, p, dl
                return r, p, d
        else:
            if not done[d]:
                return r, p, d
            t = end[d]
        if stream[d] != s:
            t += sem_lat
        if t > r:
            r = t
        p += 1
    return r, p, -1


@njit(cache=True, inline="always", error_model="numpy")
def _earliest(k, r, free_s, m):
    """Earliest start of an instruction of kind k whose dependencies end at r, on a stream free
    at free_s, machine state m."""
    if k == KIND_LS:
        return max(r, max(m[0], m[2]))
    if k == KIND_MM:
        return max(r, max(free_s, m[1]))
    return max(r, free_s)


@njit(cache=True, inline="always", error_model="numpy")
def _eval_head(s, i, hpos, hr, dep_ptr, dep_idx, done, end, stream, sem_lat, kind, free, m,
               after, start, not_before):
    """Stream s's head i: (earliest start, -1), or (inf, the instruction it waits for). The scan
    resumes where the last one stopped (hpos[s] < 0: from the start). after[i] >= 0: i may not
    start before that instruction has started (the scheduling pass's order edge; after None:
    no edges, the check compiled out); nor before not_before[i] (None: compiled out)."""
    p = hpos[s]
    r = hr[s]
    if p < 0:
        p = dep_ptr[i]
        r = 0.0 if not_before is None else not_before[i]
    r, p, blocker = _scan_deps(i, p, r, s, dep_ptr, dep_idx, done, end, stream, sem_lat)
    hpos[s] = p
    hr[s] = r
    if blocker >= 0:
        return np.inf, blocker
    if after is not None:
        g = after[i]
        if g >= 0:
            if not done[g]:
                return np.inf, g
            r = max(r, start[g])
    return _earliest(kind[i], r, free[s], m), -1


@njit(cache=True, inline="always", error_model="numpy")
def _issue(k, t, ii, lat, eng_ns, hbm_ns, issue_ns, n_eng, eng0, free_s, params, dma_free, m):
    """Issue an instruction of kind k at t on a stream free at free_s (its per-instruction columns
    as scalars): claim TensorE state, DMA engines and the HBM share. Returns (the stream's next
    free time, end, dstart (first data movement), busy time, the new machine state m)."""
    ls_free, ls_end, last_mm, pe_end, burst, hbm_free, uniform, uniform_t = m
    if k == KIND_LS:
        ls_free = t + ii
        ls_end = ls_free
        return free_s, ls_free, t, ii, (ls_free, ls_end, last_mm, pe_end, burst, hbm_free,
                                        uniform, uniform_t)
    if k == KIND_MM:
        dur = ii
        didt_init = params[2]
        if didt_init < 1.0:         # the dI/dt throttle [Explorer]
            if t - pe_end > params[4]:
                burst = t
            f = didt_init + (1.0 - didt_init) * (t - burst) / params[3]
            if f < 1.0:
                dur = dur / f
        return t + dur, t + dur + lat, t, dur, (ls_free, ls_end, t, t + dur, burst, hbm_free,
                                                 uniform, uniform_t)
    if k != KIND_DMA:
        return t + ii, t + ii + lat, t, ii, m
    n_dma = int(params[5])
    ds = t + params[1]
    first = np.inf
    last = ds
    latest = ds
    if n_eng == n_dma and uniform != 0.0:
        # every engine is free at the same time: one number stands for all 16
        first = max(ds, uniform_t)
        latest = first
        uniform_t = first + eng_ns
    elif n_eng > 0:
        if uniform != 0.0:
            dma_free[:] = uniform_t
            uniform = 0.0
        e = eng0 % n_dma
        for j in range(n_eng):
            if e >= n_dma:
                e -= n_dma
            es = dma_free[e]
            if es < ds:
                es = ds
            dma_free[e] = es + eng_ns
            if es < first:
                first = es
            if es > latest:
                latest = es
            e += 1
        if n_eng == n_dma and first == latest:
            uniform = 1.0
            uniform_t = latest + eng_ns
    if n_eng > 0 and latest + eng_ns > last:
        last = latest + eng_ns
    if hbm_ns > 0.0:
        hs = max(ds, hbm_free)
        hbm_free = hs + hbm_ns
        if hs < first:
            first = hs
        if hbm_free > last:
            last = hbm_free
    if first == np.inf:
        first = ds
    return t + issue_ns, last, first, last - first, (ls_free, ls_end, last_mm, pe_end, burst,
                                                      hbm_free, uniform, uniform_t)


_SCRATCH = Scratch()


def schedule(stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns, n_eng, eng0,
             not_before, params, order=None, sptr=None, after=None):
    """reference.schedule's answer (status, start, end, dstart, busy, stuck): each stream in
    program order, or in order[sptr[s]:sptr[s+1]] when given (the scheduling pass's order), an
    instruction i with after[i] >= 0 starting no earlier than that one (its order edges). The
    arrays are made by NumPy, as in schedule.list_schedule: the four times fresh, the rest
    scratch kept from the last call."""
    n = stream.shape[0]
    times = (np.empty(n), np.empty(n), np.empty(n), np.empty(n))
    done = _SCRATCH.get("done", n, np.bool_)[0]
    nblocked = _SCRATCH.get("nblocked", n, np.int32)[0]
    done.fill(False)
    nblocked.fill(0)
    if order is None:
        order, sptr = _stream_order(stream, int(params[6]), _SCRATCH.get("order", n, np.int64)[0])
    status, stuck = _run_ordered(stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns,
                                 issue_ns, n_eng, eng0, not_before, params, order, sptr, after,
                                 times[0], times[1], times[2], times[3], done, nblocked)
    return status, times[0], times[1], times[2], times[3], stuck


@njit(cache=True, error_model="numpy")
def _run_ordered(stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns, n_eng, eng0,
                 not_before, params, order, sptr, after, start, end, dstart, busy, done,
                 nblocked):
    """schedule()'s loop, writing the times of each instruction it issues into start, end,
    dstart, busy; done and nblocked all zero on entry. Returns (status, stuck)."""
    sem_lat = params[0]
    n_dma = int(params[5])
    n_streams = int(params[6])
    n = stream.shape[0]
    head = sptr[:-1].copy()
    free = np.zeros(n_streams)
    dma_free = np.zeros(n_dma)
    m = MACHINE0
    # A ready head's earliest start depends only on its (completed) dependencies and its own
    # stream's state, so it is computed once and kept in cand[s] until that stream schedules;
    # a blocked head (cand = inf) is looked at again only when the instruction it waits for
    # completes. The reference recomputes everything every step: same result, much slower.
    cand = np.full(n_streams, np.inf)
    blk = np.full(n_streams, -1, np.int64)      # instruction a blocked head waits for
    # nblocked[i]: how many heads wait for instruction i
    hpos = np.full(n_streams, -1, np.int64)
    hr = np.zeros(n_streams)
    pending = np.empty(n_streams, np.int64)     # streams to (re)evaluate
    npend = 0
    active = np.empty(n_streams, np.int64)      # streams with any instruction, in order
    nact = 0
    for s in range(n_streams):
        if sptr[s] < sptr[s + 1]:
            pending[npend] = s
            npend += 1
            active[nact] = s
            nact += 1
    remaining = n
    stuck = np.full(n_streams, -1, np.int64)
    fast = False         # the chosen stream goes again without a scan (see below)
    best_s = -1
    best_t = np.inf
    t2 = np.inf          # earliest start among the other streams and its stream: unchanged
    s2 = n_streams       # while only the chosen stream schedules
    while remaining > 0:
        for q in range(npend):
            s = pending[q]
            c, blocker = _eval_head(s, order[head[s]], hpos, hr, dep_ptr, dep_idx, done, end,
                                    stream, sem_lat, kind, free, m, after, start, not_before)
            cand[s] = c
            blk[s] = blocker
            if blocker >= 0:
                nblocked[blocker] += 1
        npend = 0
        if fast:
            fast = False
        else:
            best_s = -1
            best_t = np.inf
            t2 = np.inf
            s2 = n_streams
            for a in range(nact):
                s = active[a]
                c = cand[s]
                if c < best_t:
                    t2 = best_t
                    s2 = best_s if best_s >= 0 else n_streams
                    best_t = c
                    best_s = s
                elif c < t2:
                    t2 = c
                    s2 = s
        if best_s < 0:
            for s in range(n_streams):
                if head[s] < sptr[s + 1]:
                    stuck[s] = order[head[s]]
            return -1, stuck
        s = best_s
        i = order[head[s]]
        head[s] += 1
        hpos[s] = -1
        cand[s] = np.inf
        if head[s] < sptr[s + 1]:
            pending[npend] = s
            npend += 1
        remaining -= 1
        start[i] = best_t
        free[s], end[i], dstart[i], busy[i], m = _issue(
            kind[i], best_t, ii[i], lat[i], eng_ns[i], hbm_ns[i], issue_ns[i], n_eng[i], eng0[i],
            free[s], params, dma_free, m)
        done[i] = True
        if nblocked[i] > 0:
            for s3 in active[:nact]:
                if blk[s3] == i:
                    blk[s3] = -1
                    pending[npend] = s3
                    npend += 1
            nblocked[i] = 0
        elif npend == 1 and remaining > 0:
            # Only this stream changed: its next head goes next if it still beats every other
            # stream (ties to the lower stream number, as in the reference).
            c, blocker = _eval_head(s, order[head[s]], hpos, hr, dep_ptr, dep_idx, done, end,
                                    stream, sem_lat, kind, free, m, after, start, not_before)
            cand[s] = c
            npend = 0
            if blocker >= 0:
                blk[s] = blocker
                nblocked[blocker] += 1
            elif c < t2 or (c == t2 and s < s2):
                best_t = c
                fast = True
    return 0, stuck


@njit(cache=True)
def _union_length(starts, ends):
    """Total length covered by intervals [starts[i], ends[i]) (sorted by start inside)."""
    n = starts.shape[0]
    if n == 0:
        return 0.0
    idx = np.argsort(starts, kind="mergesort")
    total = 0.0
    cs = starts[idx[0]]
    ce = ends[idx[0]]
    for k in range(1, n):
        s = starts[idx[k]]
        e = ends[idx[k]]
        if s > ce:
            total += ce - cs
            cs = s
            ce = e
        elif e > ce:
            ce = e
    total += ce - cs
    return total


drop_stale_caches(globals())
