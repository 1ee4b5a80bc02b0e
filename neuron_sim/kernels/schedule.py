"""The scheduling pass as a flat numba kernel: which order each engine's queue runs its
instructions in, decided before timing as the Neuron compiler does, and the times that order gives.

The rules are those of list_schedule in neuron_sim/timing/reference.py, the specification: the
same pass in plain Python. Dependencies are scanned, start times found and resources (DMA
engines, the HBM share, TensorE's stationary buffer and dI/dt throttle) claimed by the timing
kernel's own helpers (timing.py), so the pass returns the times as well: the in-order timing run
of the order and edges it returns gives the same times (tests/sim/test_schedule.py checks both
against the reference).

Book-keeping that cannot change results: a window slot keeps its place until its instruction
issues (ties go by instruction index, which is program order within a stream); a slot whose
dependency scan stopped at an instruction not yet done is linked into that instruction's waiter
list and looked at again only when it completes; each stream's best candidate is kept until
something it depends on changes. The DMA gates read per-queue summaries (the window's first
instruction and highest waiting priority) and per-slot copies of each DMA's priority and engine
set (bits), and re-evaluate a held-back queue only when the issued DMA could have held back one
of its slots; the order edges are read from a log of the issued DMAs, from its end, when a slot
is looked at, issues or becomes its queue's first (not stamped on every window at each DMA
issue). The loop runs without numba's reference counting (_nrt=False: it allocates nothing),
which otherwise costs four atomic operations per issued instruction."""

from __future__ import annotations

import numpy as np
from numba import njit

from . import Scratch, drop_stale_caches, without_refcounting
from .indexing import skip_wraparound
from .timing import (KIND_DMA, KIND_LS, KIND_MM, MACHINE0, _earliest, _issue, _scan_deps,
                     _stream_fill)

skip_wraparound(__name__)   # no negative indexes here: see indexing.py

# Index of the lowest set bit of a byte (a stream's slots are bits of an int64: window <= 63).
# Walking the set bits this way, rather than every bit, saves a mispredicted branch per empty slot.
_LOW_BIT = np.array([0] + [(x & -x).bit_length() - 1 for x in range(1, 256)], np.int64)


@njit(cache=True, inline="always")
def _low_bit(bits):
    k = 0
    while (bits & 255) == 0:
        bits >>= 8
        k += 8
    return k + _LOW_BIT[bits & 255]


@njit(cache=True, error_model="numpy")
def _bottom_level(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns,
                  issue_ns, params, dma_stream, counts, bl):
    """reference.bottom_level, each instruction's, in bl (zeros on entry), in one reverse pass:
    dependencies point back (one that does not is ignored). Also flags the streams with DMAs
    (dma_stream[s] = 1) and counts each stream's instructions (counts[s + 1], _stream_fill's
    input: one pass less over the program)."""
    sem_lat = params[0]
    dma_fixed = params[1]
    n = stream.shape[0]
    # bl[i]: i's bl once i is passed; before, the longest path from i's end
    nxt = np.zeros(int(params[6]))      # bl of the stream's next compute instruction
    has_ord = ord_idx.shape[0] > 0      # without order edges, ord_ptr's n zeros are not read
    for i in range(n - 1, -1, -1):
        s = stream[i]
        counts[s + 1] += 1
        if kind[i] == KIND_DMA:
            b = issue_ns[i] + dma_fixed + max(eng_ns[i], hbm_ns[i]) + bl[i]
            dma_stream[s] = 1
        else:
            b = max(ii[i] + lat[i] + bl[i], ii[i] + nxt[s])
            nxt[s] = b
        bl[i] = b
        bx = b + sem_lat
        for e in range(dep_ptr[i], dep_ptr[i + 1]):
            d = dep_idx[e]
            if d < i:
                x = bx if stream[d] != s else b
                v = bl[d]
                bl[d] = x if x > v else v       # a select, not a mispredicted branch
        if has_ord:
            for e in range(ord_ptr[i], ord_ptr[i + 1]):
                d = ord_idx[e]
                if d < i:
                    v = bl[d]
                    bl[d] = b if b > v else v
    return bl


@njit(cache=True, inline="always")
def _share_engines(a, b, n_eng, eng0, n_dma):
    """Whether DMAs a and b use a DMA engine in common (each uses n_eng engines from eng0 on,
    modulo n_dma)."""
    na = n_eng[a]
    nb = n_eng[b]
    if na <= 0 or nb <= 0:
        return False
    return (eng0[b] - eng0[a]) % n_dma < na or (eng0[a] - eng0[b]) % n_dma < nb


# DMA engine sets as the bits of an int64 up to this many engines (16 on Trn1/2/3); with more,
# a set is -1 and _share_engines decides.
_MASK_ENGINES = 62


@njit(cache=True, inline="always")
def _engine_mask(i, n_eng, eng0, n_dma):
    """The DMA engines DMA i uses (n_eng[i] from eng0[i] on, modulo n_dma) as bits."""
    na = np.int64(n_eng[i])
    if na <= 0:
        return np.int64(0)
    if n_dma > _MASK_ENGINES:
        return np.int64(-1)
    full = (np.int64(1) << n_dma) - 1
    if na >= n_dma:
        return full
    e = np.int64(eng0[i]) % n_dma
    bits = (np.int64(1) << na) - 1
    return ((bits << e) | (bits >> (n_dma - e))) & full


@njit(cache=True, inline="always")
def _shares(ma, mb, a, b, n_eng, eng0, n_dma):
    """Whether DMAs a and b (engine sets ma and mb) use a DMA engine in common."""
    return (ma & mb) != 0 and (n_dma <= _MASK_ENGINES or _share_engines(a, b, n_eng, eng0, n_dma))


@njit(cache=True, inline="always")
def _passes_critical_dma(i, p, mi, s, win, W, wprio, wmask, dmas, n_dmas, head, smax, n_eng,
                         eng0, n_dma):
    """Whether DMA i (priority p, engines mi), issued ahead of its queue's program order, would
    pass an earlier DMA that is more critical and waits in its own queue's window or in another
    queue's window on a DMA engine i uses: the DMA engines are FIFO, so a DMA issued ahead of
    one it does not wait for delays that one. A window is skipped without a look at its slots
    when it holds nothing earlier than i (head: its first instruction) or nothing more critical
    (smax)."""
    if i == head[s]:
        return False                    # the first of its queue: it passes nothing
    for a in range(n_dmas):
        s2 = dmas[a]
        if head[s2] > i or smax[s2] <= p:
            continue
        for j in range(s2 * W, s2 * W + W):
            i2 = win[j]
            if 0 <= i2 < i and wprio[j] > p and (
                    s2 == s or _shares(mi, wmask[j], i, i2, n_eng, eng0, n_dma)):
                return True
    return False


@njit(cache=True, inline="always")
def _held_back_for(j, x, s2, wseen, wafter, wprio, wmask, nlog, logy, logs, logp, logm, n_eng,
                   eng0, n_dma):
    """Slot j holds DMA x of queue s2, not its queue's first: brings its order edge up to date
    with the DMAs issued since (log[wseen[j]:nlog]). Each DMA y of another queue that was more
    critical, earlier and on an engine x uses held x back (the gate of _passes_critical_dma):
    after[x] = y, the semaphore a compiler inserts so that x does not trigger before y; the
    last such y wins (it issued after the others), so the log is read from its end."""
    px = wprio[j]
    mx = wmask[j]
    q = nlog
    while q > wseen[j]:
        q -= 1
        y = logy[q]
        if y < x and logs[q] != s2 and logp[q] > px and \
                _shares(mx, logm[q], x, y, n_eng, eng0, n_dma):
            wafter[j] = y
            break
    wseen[j] = nlog


@njit(cache=True, inline="always")
def _window_summary(s, win, W, wprio, n, head, smax):
    """DMA queue s's window changed: its first instruction (head, n when empty) and its highest
    waiting DMA priority (smax, -inf when none). Returns the head's slot (-1: none)."""
    h = n
    jh = -1
    mx = -np.inf
    for j in range(s * W, s * W + W):
        x = win[j]
        if 0 <= x < h:
            h = x
            jh = j
        if wprio[j] > mx:
            mx = wprio[j]
    head[s] = h
    smax[s] = mx
    return jh


_SCRATCH = Scratch()


def list_schedule(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns,
                  issue_ns, n_eng, eng0, not_before, params, window, orders=True):
    """_list_schedule with its instruction-sized arrays made by NumPy: the times, which the
    result keeps, fresh (separate arrays under glibc's 32 MB mmap limit, so that the heap can
    hand back the memory of the last result's), the rest scratch kept from the last call
    (_SCRATCH; made by numba's allocator they cost ~16k page faults per 1M instructions).
    orders=False: order and after are returned as None (simulate needs only the times); True:
    as copies."""
    n = stream.shape[0]
    # end is NaN until the instruction issues: the pass's done flag (_scan_deps's done None)
    times = (np.empty(n), np.full(n, np.nan), np.empty(n), np.empty(n))
    ints = _SCRATCH.get("ints", n, np.int64, 5)     # order, after, DMA log (index, queue, engines)
    bl = _SCRATCH.get("bl", n, np.float64, 2)       # bottom level, DMA log (priority)
    whead = _SCRATCH.get("whead", n, np.int32)[0]   # first slot waiting for each instruction
    bl[0].fill(0.0)
    whead.fill(0)
    arrays = (ints[0], bl[0], whead, times, ints[1],
              (ints[2], ints[3], ints[4], bl[1]))
    status, order, sptr, after, *res = _list_schedule(
        stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns, issue_ns, n_eng,
        eng0, not_before, params, window, arrays)
    if not orders:
        return (status, None, sptr, None, *res)
    return (status, order.copy(), sptr, after.copy(), *res)


@njit(cache=True, error_model="numpy")
def _list_schedule(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns,
                   issue_ns, n_eng, eng0, not_before, params, window, arrays):
    """Returns (status, order, sptr, after, start, end, dstart, busy): per stream s,
    order[sptr[s]:sptr[s+1]] is its issue order; after[x] >= 0 is the DMA that x, held back for
    it, may not trigger before (-1: none); the times are those of timing.py's kernels given
    that order and those edges.
    status -1: nothing can issue (a dependency cycle through the windows)."""
    n_streams = int(params[6])
    order0, bl, whead, times, after, log = arrays
    W = 1
    for s in range(n_streams):
        W = max(W, window[s])
    slots = n_streams * W
    state = (np.full(slots, -1, np.int64),      # instruction in slot s * W + k (-1: empty)
             np.zeros(slots),                    # its dependency-ready time (partial if blocked)
             np.zeros(slots, np.int64),          # where its dependency scan stands
             np.zeros(slots, np.int64),          # next slot (+1) waiting for the same instruction
             whead,                              # first slot (+1) waiting for instruction i
             np.full(slots, np.nan),             # prio of the DMA in the slot (NaN: none)
             np.zeros(slots, np.int64),          # and its DMA engines (_engine_mask)
             np.full(slots, -1, np.int64),       # the DMA it was held back for (-1: none)
             np.zeros(slots, np.int64),          # the log position that is up to date with
             np.arange(slots) // W)              # the slot's stream (no division per wake)
    # Every instruction's outputs are written when it issues: no initial values (the issue
    # order goes where order0 has been read already).
    # times: start, end, dstart, busy; after: the order edges; log: the DMAs issued, in issue
    # order: index, queue, engines, priority (_held_back_for)
    ints = np.zeros((13, n_streams), np.int64)
    sptr = np.zeros(n_streams + 1, np.int64)
    prio = _bottom_level(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns,
                         hbm_ns, issue_ns, params, ints[8], sptr, bl)
    order0, sptr = _stream_fill(stream, sptr, order0)
    status = _run(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns,
                  issue_ns, n_eng, eng0, not_before, params, window, W, order0, sptr, state,
                  order0, times, prio, after, np.zeros(int(params[5])), ints,
                  np.zeros((4, n_streams)), log)
    return status, order0, sptr, after, times[0], times[1], times[2], times[3]


@njit(cache=True, error_model="numpy", **without_refcounting())
def _run(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns, issue_ns,
         n_eng, eng0, not_before, params, window, W, order0, sptr, state, order, times, prio,
         after, dma_free, ints, floats, log):
    win, wr, wpos, wnext, whead, wprio, wmask, wafter, wseen, wstream = state
    logy, logs, logm, logp = log
    nlog = 0
    start, end, dstart, busy = times
    fillp, outp, ready, rescan, pend, cslot, dirty, active = (ints[0], ints[1], ints[2], ints[3],
                                                              ints[4], ints[5], ints[6], ints[7])
    # the streams with DMAs (flags, and dmas[:n_dmas]); per DMA queue its window's first
    # instruction, and the highest index and lowest priority of its slots held back
    dma_stream, dmas, head, gmaxi = ints[8], ints[9], ints[10], ints[11]
    n_dma = int(params[5])
    free, cand, smax, gminp = floats[0], floats[1], floats[2], floats[3]
    sem_lat = params[0]
    n_streams = int(params[6])
    n = stream.shape[0]
    has_ord = ord_idx.shape[0] > 0      # without order edges, ord_ptr's n zeros are not read
    m = MACHINE0
    npend = 0                   # streams whose candidate is to be recomputed: pend[:npend]
    nact = 0                    # streams with instructions: active[:nact]
    for s in range(n_streams):
        fillp[s] = sptr[s]
        outp[s] = sptr[s]
        cand[s] = np.inf
        w = window[s] if window[s] > 0 else 1
        k = 0
        while k < w and fillp[s] < sptr[s + 1]:
            i = order0[fillp[s]]
            win[s * W + k] = i
            wpos[s * W + k] = dep_ptr[i]
            wr[s * W + k] = 0.0 if not_before is None else not_before[i]
            if kind[i] == KIND_DMA:
                wprio[s * W + k] = prio[i]
                wmask[s * W + k] = _engine_mask(i, n_eng, eng0, n_dma)
            rescan[s] |= 1 << k
            fillp[s] += 1
            k += 1
        if k > 0:
            dirty[s] = 1
            pend[npend] = s
            npend += 1
            active[nact] = s
            nact += 1
    n_dmas = 0
    for s in range(n_streams):
        if dma_stream[s]:
            dmas[n_dmas] = s
            n_dmas += 1
            _window_summary(s, win, W, wprio, n, head, smax)
    remaining = n
    fast = False        # only the chosen stream changed: compare it with the runner-up only
    best_s = -1
    t2 = np.inf         # the best candidate of the other streams, and its stream
    s2 = n_streams
    while remaining > 0:
        for q in range(npend):
            s = pend[q]
            dirty[s] = 0
            base = s * W
            # (re)scan new slots and slots whose blocker completed: dependencies, then the
            # same-stream order edges
            bits = rescan[s]
            rescan[s] = 0
            while bits != 0:
                k = _low_bit(bits)
                bits &= bits - 1
                j = base + k
                i = win[j]
                r, p, blocker = _scan_deps(i, wpos[j], wr[j], s, dep_ptr, dep_idx, None, end,
                                           stream, sem_lat)
                if blocker < 0 and has_ord:
                    for e in range(ord_ptr[i], ord_ptr[i + 1]):
                        if np.isnan(end[ord_idx[e]]):
                            blocker = ord_idx[e]
                            break
                wr[j] = r
                wpos[j] = p
                if blocker >= 0:
                    wnext[j] = whead[blocker]
                    whead[blocker] = j + 1
                else:
                    ready[s] |= 1 << k
            # the ready slot that can start earliest (ties: program order); a DMA does not pass
            # an earlier, more critical DMA of its queue or of a queue on its DMA engines, and
            # starts no earlier than the one it was held back for
            fs = free[s]
            best = np.inf
            bi = n
            bj = -1
            gmaxi[s] = -1
            gminp[s] = np.inf
            bits = ready[s]
            while bits != 0:
                k = _low_bit(bits)
                bits &= bits - 1
                j = base + k
                i = win[j]
                r = wr[j]
                if kind[i] == KIND_DMA:
                    if _passes_critical_dma(i, wprio[j], wmask[j], s, win, W, wprio, wmask, dmas,
                                            n_dmas, head, smax, n_eng, eng0, n_dma):
                        gmaxi[s] = max(gmaxi[s], i)
                        gminp[s] = min(gminp[s], wprio[j])
                        continue
                    if i != head[s]:
                        _held_back_for(j, i, s, wseen, wafter, wprio, wmask, nlog, logy, logs,
                                       logp, logm, n_eng, eng0, n_dma)
                    if wafter[j] >= 0:
                        r = max(r, start[wafter[j]])
                c = _earliest(kind[i], r, fs, m)
                if c < best or (c == best and i < bi):
                    best = c
                    bi = i
                    bj = j
            cand[s] = best
            cslot[s] = bj
        npend = 0
        if not fast or cand[best_s] > t2 or (cand[best_s] == t2 and best_s > s2) or \
                cand[best_s] == np.inf:
            best_s = -1
            t2 = np.inf
            s2 = n_streams
            for a in range(nact):
                s = active[a]
                c = cand[s]
                if best_s < 0 or c < cand[best_s]:
                    if best_s >= 0:
                        t2 = cand[best_s]
                        s2 = best_s
                    best_s = s
                elif c < t2:
                    t2 = c
                    s2 = s
            if cand[best_s] == np.inf:
                return -1
        fast = False
        s = best_s
        t = cand[s]
        j = cslot[s]
        i = win[j]
        k = j - s * W
        ready[s] &= ~(1 << k)
        i2 = -1
        p_old = wprio[j]
        m_old = wmask[j]
        ki = kind[i]
        if ki == KIND_DMA and i != head[s]:
            _held_back_for(j, i, s, wseen, wafter, wprio, wmask, nlog, logy, logs, logp, logm,
                           n_eng, eng0, n_dma)
        after[i] = wafter[j]
        wafter[j] = -1
        wseen[j] = nlog
        if fillp[s] < sptr[s + 1]:      # the slot takes the stream's next instruction
            i2 = order0[fillp[s]]
            win[j] = i2
            wr[j] = 0.0 if not_before is None else not_before[i2]
            wpos[j] = dep_ptr[i2]
            if kind[i2] == KIND_DMA:
                wprio[j] = prio[i2]
                wmask[j] = _engine_mask(i2, n_eng, eng0, n_dma)
            else:
                wprio[j] = np.nan
            rescan[s] |= 1 << k
            fillp[s] += 1
        else:
            win[j] = -1
            wprio[j] = np.nan
        if dma_stream[s]:
            # i2 comes after every other slot: the head changes only when i was it
            if i == head[s]:
                # the new first is held back for nothing more from now on: its edge is final
                jh = _window_summary(s, win, W, wprio, n, head, smax)
                if jh >= 0 and kind[win[jh]] == KIND_DMA:
                    _held_back_for(jh, win[jh], s, wseen, wafter, wprio, wmask, nlog, logy, logs,
                                   logp, logm, n_eng, eng0, n_dma)
            elif p_old == smax[s]:
                _window_summary(s, win, W, wprio, n, head, smax)
            elif wprio[j] > smax[s]:
                smax[s] = wprio[j]
        order[outp[s]] = i
        outp[s] += 1
        remaining -= 1
        start[i] = t
        free[s], end[i], dstart[i], busy[i], m = _issue(
            ki, t, ii[i], lat[i], eng_ns[i], hbm_ns[i], issue_ns[i], n_eng[i], eng0[i], free[s],
            params, dma_free, m)
        cand[s] = np.inf
        if ready[s] != 0 or rescan[s] != 0:
            dirty[s] = 1
            pend[npend] = s
            npend += 1
        if ki == KIND_DMA:
            logy[nlog] = i
            logs[nlog] = s
            logm[nlog] = m_old
            logp[nlog] = p_old
            nlog += 1
        if dma_stream[s]:
            # a DMA window changed: a DMA held back for i may go now (only one later and less
            # critical than i was), and the DMA that took its slot may hold back another
            # queue's candidate
            for a in range(n_dmas):
                s3 = dmas[a]
                if dirty[s3] != 0:
                    continue
                if ki == KIND_DMA and gmaxi[s3] > i and p_old > gminp[s3]:
                    redo = True
                elif i2 >= 0 and kind[i2] == KIND_DMA and cand[s3] != np.inf:
                    x = win[cslot[s3]]
                    redo = x > i2 and wprio[j] > wprio[cslot[s3]] and x != head[s3] and \
                        _shares(wmask[cslot[s3]], wmask[j], x, i2, n_eng, eng0, n_dma)
                else:
                    redo = False
                if redo:
                    dirty[s3] = 1
                    pend[npend] = s3
                    npend += 1
        if (ki == KIND_LS or ki == KIND_MM) and dirty[0] == 0:
            dirty[0] = 1                # the LS/MM state feeds TensorE's next start
            pend[npend] = 0
            npend += 1
        w1 = whead[i]
        fast = npend == 1 and pend[0] == s and w1 == 0
        while w1 != 0:                  # wake the slots that waited for i
            j = w1 - 1
            s3 = wstream[j]
            if dirty[s3] == 0:
                dirty[s3] = 1
                pend[npend] = s3
                npend += 1
            rescan[s3] |= 1 << (j - s3 * W)
            w1 = wnext[j]
    return 0


drop_stale_caches(globals())
