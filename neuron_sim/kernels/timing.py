"""The timing model as a flat numba kernel: arrays and scalars in, arrays out, no validation.
Same model and same arithmetic as neuron_sim/timing/reference.py (the specification), plus
book-keeping that cannot change results: each stream's earliest start is cached until something
it depends on changes, and a head's dependency scan resumes where it stopped.
Compiled once and cached on disk (cache=True)."""

from __future__ import annotations

import numpy as np
from numba import njit

KIND_LS, KIND_MM, KIND_DMA = 1, 2, 3


@njit(cache=True)
def _stream_order(stream, n_streams):
    n = stream.shape[0]
    counts = np.zeros(n_streams + 1, np.int64)
    for i in range(n):
        counts[stream[i] + 1] += 1
    for s in range(n_streams):
        counts[s + 1] += counts[s]
    fill = counts[:-1].copy()
    order = np.empty(n, np.int64)
    for i in range(n):
        s = stream[i]
        order[fill[s]] = i
        fill[s] += 1
    return order, counts


@njit(cache=True, inline="always")
def _eval_head(s, i, hpos, hr, dep_ptr, dep_idx, done, end, stream, sem_lat):
    """Scan head i's dependencies from where the last scan stopped. Returns (ready time, -1) or
    (partial max, blocking instruction)."""
    p = hpos[s]
    if p < 0:
        p = dep_ptr[i]
        hr[s] = 0.0
    r = hr[s]
    blocker = -1
    while p < dep_ptr[i + 1]:
        d = dep_idx[p]
        if not done[d]:
            blocker = d
            break
        t = end[d]
        if stream[d] != s:
            t += sem_lat
        if t > r:
            r = t
        p += 1
    hpos[s] = p
    hr[s] = r
    return r, blocker


@njit(cache=True, error_model="numpy")
def _schedule(stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns, n_eng, eng0,
              params):
    """Program order within each stream."""
    order, sptr = _stream_order(stream, int(params[6]))
    return _schedule_ordered(stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns,
                             n_eng, eng0, params, order, sptr)


@njit(cache=True, error_model="numpy")
def _schedule_ordered(stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns, n_eng,
                      eng0, params, order, sptr):
    """Each stream runs order[sptr[s]:sptr[s+1]] in that order (the scheduling pass's)."""
    sem_lat = params[0]
    dma_fixed = params[1]
    didt_init = params[2]
    didt_ramp = params[3]
    didt_reset = params[4]
    n_dma = int(params[5])
    n_streams = int(params[6])
    n = stream.shape[0]
    head = sptr[:-1].copy()
    start = np.zeros(n)
    end = np.zeros(n)
    dstart = np.zeros(n)
    busy = np.zeros(n)
    done = np.zeros(n, np.bool_)
    free = np.zeros(n_streams)
    dma_free = np.zeros(n_dma)
    # A ready head's earliest start depends only on its (completed) dependencies and its own
    # stream's state, so it is computed once and kept in cand[s] until that stream schedules;
    # a blocked head (cand = inf) is looked at again only when the instruction it waits for
    # completes. The reference recomputes everything every step: same result, much slower.
    cand = np.full(n_streams, np.inf)
    blk = np.full(n_streams, -1, np.int64)      # instruction a blocked head waits for
    nblocked = np.zeros(n, np.int32)            # how many heads wait for each instruction
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
    uniform = True       # all DMA engines free at uniform_t (dma_free is stale meanwhile)
    uniform_t = 0.0
    hbm_free = 0.0
    ls_free = 0.0
    ls_end = 0.0
    last_mm_start = 0.0
    pe_busy_end = -np.inf
    burst_start = 0.0
    throttle = didt_init < 1.0
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
            i = order[head[s]]
            r, blocker = _eval_head(s, i, hpos, hr, dep_ptr, dep_idx, done, end, stream,
                                    sem_lat)
            if blocker >= 0:
                cand[s] = np.inf
                blk[s] = blocker
                nblocked[blocker] += 1
                continue
            blk[s] = -1
            k = kind[i]
            if k == KIND_LS:
                cand[s] = max(r, max(ls_free, last_mm_start))
            elif k == KIND_MM:
                cand[s] = max(r, max(free[s], ls_end))
            else:
                cand[s] = max(r, free[s])
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
            return -1, start, end, dstart, busy, stuck
        s = best_s
        i = order[head[s]]
        head[s] += 1
        hpos[s] = -1
        cand[s] = np.inf
        if head[s] < sptr[s + 1]:
            pending[npend] = s
            npend += 1
        remaining -= 1
        t = best_t
        k = kind[i]
        start[i] = t
        dstart[i] = t
        if k == KIND_LS:
            e = t + ii[i]
            ls_free = e
            ls_end = e
            busy[i] = ii[i]
            end[i] = e
        elif k == KIND_MM:
            dur = ii[i]
            if throttle:
                if t - pe_busy_end > didt_reset:
                    burst_start = t
                f = didt_init + (1.0 - didt_init) * (t - burst_start) / didt_ramp
                if f < 1.0:
                    dur = dur / f
            free[s] = t + dur
            pe_busy_end = t + dur
            last_mm_start = t
            busy[i] = dur
            end[i] = t + dur + lat[i]
        elif k == KIND_DMA:
            free[s] = t + issue_ns[i]
            ds = t + dma_fixed
            first = np.inf
            last = ds
            w = eng_ns[i]
            latest = ds
            if n_eng[i] == n_dma and uniform:
                # every engine is free at the same time: one number stands for all 16
                es = max(ds, uniform_t)
                uniform_t = es + w
                first = es
                latest = es
            elif n_eng[i] > 0:
                if uniform:
                    dma_free[:] = uniform_t
                    uniform = False
                e = eng0[i] % n_dma
                for j in range(n_eng[i]):
                    if e >= n_dma:
                        e -= n_dma
                    es = dma_free[e]
                    if es < ds:
                        es = ds
                    dma_free[e] = es + w
                    if es < first:
                        first = es
                    if es > latest:
                        latest = es
                    e += 1
                if n_eng[i] == n_dma and first == latest:
                    uniform = True
                    uniform_t = latest + w
            if n_eng[i] > 0 and latest + w > last:
                last = latest + w
            if hbm_ns[i] > 0.0:
                hs = max(ds, hbm_free)
                he = hs + hbm_ns[i]
                hbm_free = he
                if hs < first:
                    first = hs
                if he > last:
                    last = he
            if first == np.inf:
                first = ds
            dstart[i] = first
            busy[i] = last - first
            end[i] = last
        else:
            free[s] = t + ii[i]
            busy[i] = ii[i]
            end[i] = t + ii[i] + lat[i]
        done[i] = True
        if nblocked[i] > 0:
            for s2 in active[:nact]:
                if blk[s2] == i:
                    blk[s2] = -1
                    pending[npend] = s2
                    npend += 1
            nblocked[i] = 0
        elif npend == 1 and remaining > 0:
            # Only this stream changed: its next head goes next if it still beats every other
            # stream (ties to the lower stream number, as in the reference).
            i2 = order[head[s]]
            r, blocker = _eval_head(s, i2, hpos, hr, dep_ptr, dep_idx, done, end, stream,
                                    sem_lat)
            if blocker < 0:
                k2 = kind[i2]
                if k2 == KIND_LS:
                    c = max(r, max(ls_free, last_mm_start))
                elif k2 == KIND_MM:
                    c = max(r, max(free[s], ls_end))
                else:
                    c = max(r, free[s])
                cand[s] = c
                if c < t2 or (c == t2 and s < s2):
                    best_t = c
                    fast = True
                npend = 0
            else:
                cand[s] = np.inf
                blk[s] = blocker
                nblocked[blocker] += 1
                npend = 0
    return 0, start, end, dstart, busy, stuck


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
