"""Place a torch.profiler trace of the simulated device on the simulated clock.

Kineto writes every row on the host's wall clock: device rows start when the simulator's host
issued them, and host rows last as long as the simulator's CPU took (computing results on the
CPU, lowering and timing programs at each synchronisation). Read as a Trainium trace that is a
host-bound job: microseconds of device work spread over the simulator's milliseconds.

`to_simulated_clock(trace)` rewrites the timestamps so the trace has the shape a capture on the
hardware would have:

- host time is one monotone map of the wall clock, shared by all host threads (so nesting and
  the order between threads stay): between two consecutive launches the host spends at most
  `HOST_ISSUE_NS` (the modelled cost of issuing one eager op: dispatch plus runtime enqueue),
  never the simulator's own CPU time;
- each device row starts when its launch was issued on that clock or when the previous row of
  its stream ended, whichever is later, and keeps its simulated duration exactly; engine lanes
  move with their op;
- at each synchronisation (a drain of the simulator's queue, whose wall times the profiling hook
  records; without them, the end of each `ProfilerStep#` row) the host waits until the device
  has finished everything issued so far, as a real host blocks in `synchronize()` or `.item()`.

Not modelled: waits between streams (events), which are not in the trace; host work that is not
issuing ops (data loading, Python between steps) counts as at most one issue cost per gap."""

from __future__ import annotations

import bisect
from collections import deque

import numpy as np

from .trace import is_lane_row, is_launch_row, is_op_row

CLOCK_KEY = "neuronClock"
# Assumption: host cost of one eager op on a Trn host (PyTorch dispatch + runtime enqueue).
# PyTorch eager dispatch of a small op on a current x86 host is ~2 us; the runtime start of the
# cached program (eager_launch_s, 25 us on Trn2) is already inside each device row ("Runtime").
HOST_ISSUE_NS = 2_000
CLOCKS = ("simulated", "wall")


def check_clock(clock: str) -> str:
    if clock not in CLOCKS:
        raise ValueError(f"clock={clock!r}: expected one of {CLOCKS} ('simulated' places rows "
                         "on the simulated device clock, 'wall' keeps the simulator's wall clock)")
    return clock


def mark_clock(trace: dict, clock: str, **info) -> dict:
    """Record which clock the trace's timestamps are on (top-level key `neuronClock`)."""
    note = ("device rows on the simulated device clock; host rows where a Trn host would issue "
            "them" if clock == "simulated" else
            "host and device rows on the simulator's wall clock (device rows keep their "
            "simulated durations; gaps between them are simulator time)")
    trace[CLOCK_KEY] = {"clock": clock, "note": note, **info}
    return trace


def to_simulated_clock(trace: dict, drains_ns=None) -> dict:
    """Rewrite `trace` (a Chrome trace dict from torch.profiler with neuron device rows) in place
    onto the simulated clock; `drains_ns` are the wall times (ns since the epoch) of the
    simulator's queue drains during the profile. Returns the trace."""
    if (trace.get(CLOCK_KEY) or {}).get("clock") == "simulated":
        return trace
    events = trace.get("traceEvents", [])
    base_us = float(trace.get("baseTimeNanoseconds") or 0) / 1e3
    issue = HOST_ISSUE_NS / 1e3
    ops = [e for e in events if is_op_row(e)]
    device_pids = {e.get("pid") for e in ops} | {e.get("pid") for e in events if is_lane_row(e)}
    host = [e for e in events if e.get("pid") not in device_pids
            and isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    if not host:
        return mark_clock(trace, "simulated", host_issue_ns=HOST_ISSUE_NS, syncs="none")

    # Which launch issued which device row: same correlation id, in order.
    launches = {}          # External id -> wall ts of its launches not yet matched, in order
    for e in sorted((e for e in host if is_launch_row(e)), key=lambda e: e["ts"]):
        launches.setdefault(e["args"]["External id"], deque()).append(e["ts"])
    issue_at = {}          # id(op row) -> wall ts of its issue
    for e in sorted(ops, key=lambda e: e["ts"]):
        corr = (e.get("args") or {}).get("External id")
        ls = launches.get(corr) if corr is not None else None
        issue_at[id(e)] = ls.popleft() if ls else e["ts"]

    if drains_ns:
        syncs = [d / 1e3 - base_us for d in drains_ns]
        how = "queue drains"
    else:
        syncs = [e["ts"] + e.get("dur", 0.0) for e in host
                 if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
        how = "ends of ProfilerStep rows (no drain record)"
    w0 = min(e["ts"] for e in host)
    w_end = max(e["ts"] + float(e.get("dur", 0.0) or 0.0) for e in host)
    # Anchors in wall order: issues (kind 0) before syncs (kind 1) at the same instant.
    points = sorted([(issue_at[id(e)], 0, k) for k, e in enumerate(ops)]
                    + [(w, 1, -1) for w in syncs if w0 <= w <= w_end])
    # The simulated clock starts at 0.0 (the shift goes into baseTimeNanoseconds), so analysers
    # that subtract the trace's first timestamp compute every end exactly as written here.
    W, S = [w0], [0.0]
    s, w_prev = 0.0, w0
    stream_end, done = {}, 0.0
    new_ts = {}
    for w, kind, k in points:
        s += min(max(w - w_prev, 0.0), issue)
        w_prev = w
        if kind == 0:
            e = ops[k]
            key = (e.get("pid"), e.get("tid"))
            prev_end = stream_end.get(key, 0.0)
            # a row that waits for its stream starts exactly where the previous one ends (the
            # same float sum a reader computes), so back-to-back rows merge into one busy span
            start = prev_end if prev_end >= s else round(s, 3)
            stream_end[key] = start + float(e.get("dur", 0.0))
            done = max(done, stream_end[key])
            new_ts[k] = start
        else:
            s = max(s, done)         # the host blocks until the device is idle
        W.append(w)
        S.append(s)
    W.append(max(w_end, w_prev))
    S.append(s + min(max(w_end - w_prev, 0.0), issue))
    Wa, Sa = np.asarray(W), np.asarray(S)

    # Host rows (and the flow starts on them): through the map, in one vectorised call.
    starts = np.array([e["ts"] for e in host], dtype=float)
    ends = starts + np.array([float(e.get("dur", 0.0) or 0.0) if e.get("ph") == "X" else 0.0
                              for e in host])
    a = np.round(np.interp(starts, Wa, Sa), 3).tolist()
    b = np.round(np.interp(ends, Wa, Sa), 3).tolist()
    for e, x, y in zip(host, a, b):
        e["ts"] = x
        if e.get("ph") == "X":
            e["dur"] = round(max(y - x, 0.0), 3)
    for e in events:           # metadata rows carry a timestamp nobody reads: keep it in range
        if e.get("ph") == "M" and isinstance(e.get("ts"), (int, float)):
            e["ts"] = 0
    # Device rows, their lanes and the flow ends bound to them: moved with the row.
    moved = {}             # (pid, tid, old ts) -> new ts (flow ends bind to the row's start)
    starts = {}            # pid -> sorted [(old ts, old end, name, shift)]
    for k, e in enumerate(ops):
        old = e["ts"]
        e["ts"] = new_ts[k]
        moved[(e.get("pid"), e.get("tid"), old)] = e["ts"]
        starts.setdefault(e.get("pid"), []).append((old, old + float(e.get("dur", 0.0)),
                                                    e.get("name"), e["ts"] - old))
    for rows in starts.values():
        rows.sort()
    keys = {p: [r[0] for r in rows] for p, rows in starts.items()}
    for e in events:
        pid = e.get("pid")
        if pid not in device_pids or not isinstance(e.get("ts"), (int, float)):
            continue
        if is_lane_row(e):
            i = bisect.bisect_right(keys.get(pid, []), e["ts"] + 1e-3) - 1
            near = starts.get(pid, [])[max(i - 7, 0):i + 1]
            shift = near[-1][3] if near else None    # the op started last before the lane row,
            for o in reversed(near):                 # or the containing op of the same name
                if o[0] - 1e-3 <= e["ts"] <= o[1] + 1e-3 and o[2] == e["args"].get("op"):
                    shift = o[3]
                    break
            if shift is not None:
                e["ts"] = round(e["ts"] + shift, 3)
        elif e.get("ph") in ("f", "s", "t"):
            t = moved.get((pid, e.get("tid"), e["ts"]))
            if t is not None:
                e["ts"] = t
    if isinstance(trace.get("baseTimeNanoseconds"), int):
        trace["baseTimeNanoseconds"] += int(round(w0 * 1e3))
    return mark_clock(trace, "simulated", host_issue_ns=HOST_ISSUE_NS, syncs=how)
