"""The timing model, written plainly in Python. This is the specification: the numba kernel in
neuron_sim/kernels/timing.py computes the same thing, and tests compare the two.

Model (one NeuronCore):
- Streams: 5 in-order sequencer queues (TensorE, VectorE, ScalarE, GpSimd, SyncE) and 16 DMA
  queues. Each instruction starts when its dependencies are complete and its stream is free;
  a dependency between two different streams costs the semaphore latency.
- Which stream goes next: the one whose head instruction can start earliest (ties: lower
  stream number). This fixes the order in which shared resources (DMA engines, HBM) are claimed,
  so the simulation is deterministic and totally ordered.
- Compute instruction: occupies its engine for `ii`, result visible `lat` later.
- TensorE: LoadStationary runs in the background: it may start once the previous MultiplyMoving
  has started (one shadow weight buffer) and the MultiplyMoving that uses it waits for it.
  MultiplyMoving is slowed by the dI/dt throttle: after an idle gap longer than `didt_reset`,
  the array runs at `didt_init` of full rate, ramping linearly to 100% over `didt_ramp` [Explorer].
- DMA instruction: triggered at t0 on its queue (next trigger on that queue >= t0 + issue);
  data moves from t0 + `dma_fixed` on each of its engines (FIFO per engine) and through the
  core's HBM share (FIFO); it completes when the last of those finishes.
- not_before[i] (None: all 0): i starts no earlier, as for a dependency on an instruction of
  another core ending then (the other core's semaphore; simulate.simulate_cores sets it).

Parameters (array `params`): see PARAM_NAMES."""

from __future__ import annotations

import math

PARAM_NAMES = ("sem_lat_ns", "dma_fixed_ns", "didt_init", "didt_ramp_ns", "didt_reset_ns",
               "n_dma_engines", "n_streams")

KIND_LS, KIND_MM, KIND_DMA = 1, 2, 3


def stream_order(stream, n_streams, issued=None):
    """Instruction indices grouped by stream (CSR), in program order inside each or, given
    `issued`, in the order of that list."""
    buckets = [[] for _ in range(n_streams)]
    for i in range(len(stream)) if issued is None else issued:
        buckets[stream[i]].append(i)
    order, ptr = [], [0]
    for b in buckets:
        order.extend(b)
        ptr.append(len(order))
    return order, ptr


def schedule(stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns, n_eng, eng0,
             not_before, params, order=None, sptr=None, after=None):
    """Returns (status, start, end, data_start, busy, stuck) with status 0 on success, -1 on a
    deadlock (then `stuck` lists, per stream, the head instruction that cannot start or -1).
    `order`/`sptr` (CSR by stream) give each stream's issue order; default program order.
    after[i] >= 0: i starts no earlier than that instruction (the scheduling pass's edges)."""
    status, _, start, end, dstart, busy, stuck = _run(
        stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns, n_eng, eng0,
        not_before, params, order, sptr, after=after)
    return status, start, end, dstart, busy, stuck


def list_schedule(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns,
                  issue_ns, n_eng, eng0, not_before, params, window):
    """The scheduling pass (in numba: neuron_sim/kernels/schedule.py): the order each engine's
    queue runs its instructions in, decided before timing as the Neuron compiler does, by list
    scheduling with the timing model's costs. Each stream issues, from a window of its next
    `window[s]` instructions in program order, the one that can start earliest (ties: program
    order), so an instruction waiting on a latency, a semaphore or a DMA lets an independent one
    of a later loop iteration go first; across streams the earliest goes next (ties: lower
    stream number), as in schedule(). An instruction waits for its dependencies and for its
    same-stream order edges ord_ptr/ord_idx (the write-after-read/write ordering program order
    gives the in-order run for free). A window of 1 keeps program order (TensorE: whether a
    LoadStationary is skipped is decided in it). A DMA issued ahead of its queue's program order
    does not pass an earlier DMA with a higher bottom level waiting in its queue's window or in
    another queue's window on a DMA engine it uses: the DMA engines are FIFO, so the hoisted
    transfer would delay the more critical one (a weight prefetch ahead of the store everything
    waits for). When such a DMA y of another queue issues, each DMA x it held back gets the
    order edge after[x] = y: x starts no earlier than y (the semaphore a compiler inserts; the
    last y wins). Returns (status, order, sptr, after, start, end, data_start, busy):
    order[sptr[s]:sptr[s+1]] is stream s's issue order."""
    prio = bottom_level(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns,
                        issue_ns, params)
    after = [-1] * len(stream)
    status, issued, start, end, dstart, busy, _ = _run(
        stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns, n_eng, eng0,
        not_before, params, None, None, window, ord_ptr, ord_idx, prio, after)
    order, sptr = stream_order(stream, int(params[6]), issued)
    return status, order, sptr, after, start, end, dstart, busy


def _share_engines(a, b, n_eng, eng0, n_dma):
    """Whether DMAs a and b use a DMA engine in common."""
    ea = {(int(eng0[a]) + j) % n_dma for j in range(int(n_eng[a]))}
    return any((int(eng0[b]) + j) % n_dma in ea for j in range(int(n_eng[b])))


def bottom_level(stream, kind, ii, lat, dep_ptr, dep_idx, ord_ptr, ord_idx, eng_ns, hbm_ns,
                 issue_ns, params):
    """The scheduling priority: each instruction's longest path to the end of the program through
    its dependents (cross-stream edges cost the semaphore latency), same-stream order edges and
    each compute engine's program order (an in-order machine: the engine's next instruction waits
    for this one's ii), costs being the instruction's own (compute: ii + lat; DMA: issue + fixed
    latency + the longer of its engine and HBM times)."""
    sem_lat, dma_fixed = float(params[0]), float(params[1])
    n = len(stream)
    succ = [[] for _ in range(n)]
    for i in range(n):
        for d in dep_idx[dep_ptr[i]:dep_ptr[i + 1]]:
            succ[int(d)].append((i, sem_lat if stream[d] != stream[i] else 0.0))
        for d in ord_idx[ord_ptr[i]:ord_ptr[i + 1]]:
            succ[int(d)].append((i, 0.0))
    bl = [0.0] * n
    engine_next = {}                    # stream -> bl of its next compute instruction
    for i in reversed(range(n)):
        tail = max((bl[j] + e for j, e in succ[i]), default=0.0)
        if kind[i] == KIND_DMA:
            bl[i] = issue_ns[i] + dma_fixed + max(eng_ns[i], hbm_ns[i]) + tail
        else:
            bl[i] = max(ii[i] + lat[i] + tail, ii[i] + engine_next.get(int(stream[i]), 0.0))
            engine_next[int(stream[i])] = bl[i]
    return bl


def _run(stream, kind, ii, lat, dep_ptr, dep_idx, eng_ns, hbm_ns, issue_ns, n_eng, eng0,
         not_before, params, order, sptr, window=None, ord_ptr=None, ord_idx=None, prio=None,
         after=None):
    """schedule() and list_schedule(): each stream considers its next `window[s]` instructions
    (default 1, its head in `order`). Also returns the instructions in the order they issued."""
    sem_lat, dma_fixed, didt_init, didt_ramp, didt_reset = (float(p) for p in params[:5])
    n_dma, n_streams = int(params[5]), int(params[6])
    stream, kind, ii, lat = list(stream), list(kind), list(ii), list(lat)
    dep_ptr, dep_idx = list(dep_ptr), list(dep_idx)
    n = len(stream)
    if order is None:
        order, sptr = stream_order(stream, n_streams)
    order, sptr = [int(x) for x in order], [int(x) for x in sptr]
    if ord_ptr is not None:
        ord_ptr, ord_idx = list(ord_ptr), list(ord_idx)
    width = [1] * n_streams if window is None else [max(int(w), 1) for w in window]
    win = [order[sptr[s]:min(sptr[s] + width[s], sptr[s + 1])] for s in range(n_streams)]
    nxt = [sptr[s] + len(win[s]) for s in range(n_streams)]
    issued = []
    start, end, dstart, busy = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    done = [False] * n
    free = [0.0] * n_streams
    dma_free = [0.0] * n_dma
    hbm_free = 0.0
    ls_free = ls_end = last_mm_start = 0.0
    pe_busy_end = -math.inf
    burst_start = 0.0
    throttle = didt_init < 1.0
    remaining = n
    while remaining:
        best_s, best_t, best_i = -1, math.inf, -1
        for s in range(n_streams):
            for i in win[s]:                    # program order
                r, ok = 0.0 if not_before is None else float(not_before[i]), True
                for d in dep_idx[dep_ptr[i]:dep_ptr[i + 1]]:
                    if not done[d]:
                        ok = False
                        break
                    t = end[d] + (sem_lat if stream[d] != s else 0.0)
                    if t > r:
                        r = t
                if ord_ptr is not None and not all(done[d] for d in
                                                   ord_idx[ord_ptr[i]:ord_ptr[i + 1]]):
                    ok = False
                if after is not None and after[i] >= 0:
                    if done[after[i]]:
                        r = max(r, start[after[i]])
                    else:
                        ok = False
                if not ok:
                    continue
                k = kind[i]
                if k == KIND_DMA and prio is not None and any(j < i for j in win[s]) and any(
                        j < i and kind[j] == KIND_DMA and prio[j] > prio[i] and (
                            s2 == s or _share_engines(i, j, n_eng, eng0, n_dma))
                        for s2 in range(n_streams) for j in win[s2]):
                    continue                    # would pass a more critical DMA
                if k == KIND_LS:
                    c = max(r, ls_free, last_mm_start)
                elif k == KIND_MM:
                    c = max(r, free[s], ls_end)
                else:
                    c = max(r, free[s])
                if c < best_t:
                    best_t, best_s, best_i = c, s, i
        if best_s < 0:
            stuck = [win[s][0] if win[s] else -1 for s in range(n_streams)]
            return -1, issued, start, end, dstart, busy, stuck
        s = best_s
        i = best_i
        win[s].remove(i)
        if nxt[s] < sptr[s + 1]:
            win[s].append(order[nxt[s]])
            nxt[s] += 1
        issued.append(i)
        remaining -= 1
        if prio is not None and kind[i] == KIND_DMA:    # the DMAs i held back: edges i -> x
            for s2 in range(n_streams):
                for x in win[s2]:
                    if s2 != s and x > i and kind[x] == KIND_DMA and prio[i] > prio[x] and \
                            any(j < x for j in win[s2]) and \
                            _share_engines(x, i, n_eng, eng0, n_dma):
                        after[x] = i
        t = best_t
        k = kind[i]
        start[i] = t
        dstart[i] = t
        if k == KIND_LS:
            e = t + ii[i]
            ls_free = ls_end = e
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
            first, last = math.inf, ds
            for j in range(n_eng[i]):
                e = (eng0[i] + j) % n_dma
                es = max(ds, dma_free[e])
                ee = es + eng_ns[i]
                dma_free[e] = ee
                if es < first:
                    first = es
                if ee > last:
                    last = ee
            if hbm_ns[i] > 0.0:
                hs = max(ds, hbm_free)
                he = hs + hbm_ns[i]
                hbm_free = he
                if hs < first:
                    first = hs
                if he > last:
                    last = he
            if first == math.inf:
                first = ds
            dstart[i] = first
            busy[i] = last - first
            end[i] = last
        else:
            free[s] = t + ii[i]
            busy[i] = ii[i]
            end[i] = t + ii[i] + lat[i]
        done[i] = True
    return 0, issued, start, end, dstart, busy, [-1] * n_streams
