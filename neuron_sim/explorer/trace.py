"""Read a saved torch.profiler / Chrome trace back into a Summary (for `neuron-sim explorer`).

A trace written by `torch_neuronx.profiling.NeuronProfiler` carries the full summary under the
top-level key `neuronExplorer` (Chrome's trace format allows extra top-level keys; Perfetto and
chrome://tracing ignore them). Any other trace with neuron device rows is summarised from its
events alone: device time per op from the device rows, engine activity from the engine-lane rows
(each span's busy share is in its label); HFU, MFU, MBU and DMA bytes are then unknown and the
summary says so."""

from __future__ import annotations

import json
import re

import numpy as np

from ..kernels.timing import _union_length
from .summary import ENGINES, OpRecord, Summary, summarize

EXPLORER_KEY = "neuronExplorer"
NO_VERDICT = ("none: this trace has no neuronExplorer section (write it with NeuronProfiler, or "
              "run torch_neuronx.profiling.prepare_trace on it in the process that profiled)")
_BUSY = re.compile(r"(\d+)% busy")


def load_trace(path) -> dict:
    with open(path) as f:
        return json.load(f)


def is_op_row(e: dict) -> bool:
    """A neuron device row of one op or compiled graph (its duration is the simulated time)."""
    return e.get("ph") == "X" and (e.get("args") or {}).get("device_type") == "neuron"


def is_lane_row(e: dict) -> bool:
    """An engine-lane row (TensorE, VectorE, a DMA queue...) of a neuron device."""
    return e.get("ph") == "X" and "lane" in (e.get("args") or {})


LAUNCH_CATEGORY = "privateuse1_runtime"


def is_launch_row(e: dict) -> bool:
    """The host side of a device launch (`neuron::launch`, on the issuing thread)."""
    return (e.get("ph") == "X" and e.get("cat") == LAUNCH_CATEGORY
            and "External id" in (e.get("args") or {}))


def device_events(trace: dict):
    """(op rows, lane rows) of the neuron device in a Chrome trace."""
    ops, lanes = [], []
    for e in trace.get("traceEvents", []):
        if is_op_row(e):
            ops.append(e)
        elif is_lane_row(e):
            lanes.append(e)
    return ops, lanes


def rebase_timestamps(trace: dict) -> float:
    """Shift every timestamp so the trace starts near 0 and move the shift into
    `baseTimeNanoseconds`: absolute times (and so the alignment of several ranks' traces) are
    unchanged, but each event's "ts" loses about seven digits, a tenth of a long trace's size.
    Returns the shift in microseconds."""
    events = trace.get("traceEvents", [])
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    shift = float(int(min(stamps, default=0)))
    if shift <= 0:          # no timestamps, or the trace starts at 0 already
        return 0.0
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(e["ts"] - shift, 3)
    if isinstance(trace.get("baseTimeNanoseconds"), int):
        trace["baseTimeNanoseconds"] += int(shift) * 1000
    return shift


ROUNDING_US = 0.002      # what 3-decimal timestamps and their float sums can be off by


def nest_host_rows(trace: dict) -> int:
    """Make the host rows of each thread nest as exactly in floating point as they do in time.
    Timestamps are microseconds with 3 decimals, which binary floats do not hold exactly, so a
    reader's ts + dur can put a child's end past its parent's (0.002 + 1.0 > 0.001 + 1.001) or a
    row's end past the start of the next row (5.001 + 0.001 > 5.002); TensorBoard's profiler then
    logs "ranges on the same thread should not intersect" and drops the row. Rows that cross by
    no more than ROUNDING_US are trimmed by a nanosecond or less: a child to its parent's end, a
    row to the start of the row that follows it. Device rows (flat per stream) are left alone;
    overlaps larger than rounding are left as they are. Returns the rows trimmed."""
    device = {e.get("pid") for e in trace.get("traceEvents", []) if is_op_row(e) or is_lane_row(e)}
    threads = {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("pid") not in device and isinstance(e.get("ts"),
                                                                            (int, float)):
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    trimmed = 0

    def end(e):
        return e["ts"] + e.get("dur", 0.0)

    def trim_to(e, t):          # the largest 3-decimal dur with e's end <= t in floats
        d = max(round(t - e["ts"], 3), 0.0)
        while d > 0 and e["ts"] + d > t:
            d = max(round(d - 0.001, 3), 0.0)
        e["dur"] = d

    for rows in threads.values():
        rows.sort(key=lambda e: (e["ts"], -end(e)))
        stack = []
        for e in rows:
            while stack and end(stack[-1]) <= e["ts"]:
                stack.pop()
            while stack and end(e) > end(stack[-1]):
                top = stack[-1]
                if e["ts"] >= end(top) - ROUNDING_US:       # the next row, not a child
                    trim_to(top, e["ts"])
                    stack.pop()
                elif end(e) - end(top) <= ROUNDING_US:      # a child past its parent's end
                    trim_to(e, end(top))
                else:
                    break                                     # a real overlap: not ours
                trimmed += 1
            stack.append(e)
    return trimmed


def compact_trace(trace: dict) -> dict:
    """Make a trace smaller without losing anything a viewer or analyser reads: timestamps
    rebased (above) and torch's "Record function id" dropped where it is 0, as it is for every
    op unless record-function ids are turned on. Written with `separators=(",", ":")`, a
    100-step profile of the demo model stays under 100 MB. Host rows nest exactly
    (`nest_host_rows`)."""
    rebase_timestamps(trace)
    nest_host_rows(trace)
    for e in trace.get("traceEvents", []):
        args = e.get("args")
        if args and args.get("Record function id") == 0:
            del args["Record function id"]
    return trace


def summary_from_trace(trace: dict) -> Summary:
    if EXPLORER_KEY in trace and "summary" in trace[EXPLORER_KEY]:
        return Summary.from_dict(trace[EXPLORER_KEY]["summary"])
    ops, lanes = device_events(trace)
    if not ops:
        raise ValueError("no neuron device rows in this trace: profile with "
                         "activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]")
    recs = {}
    for e in ops:
        r = recs.setdefault(e["name"], OpRecord(e["name"]))
        r.count += 1
        r.device_ns += float(e.get("dur", 0.0)) * 1e3
    busy = {k: 0.0 for k in ENGINES}
    dma_spans = []
    for e in lanes:
        lane = e["args"]["lane"]
        m = _BUSY.search(e.get("name", ""))
        frac = int(m.group(1)) / 100.0 if m else 1.0
        dur = float(e.get("dur", 0.0)) * 1e3
        if lane.startswith("DMA"):
            ts = float(e["ts"]) * 1e3
            dma_spans.append((ts, ts + dur * frac))
        elif lane in busy:
            busy[lane] += dur * frac
    spans = np.array(dma_spans, dtype=float).reshape(-1, 2)
    busy["DMA"] = float(_union_length(spans[:, 0], spans[:, 1]))
    total = sum(r.device_ns for r in recs.values())
    # engine time is known only region-wide: give it to one pseudo-record
    carrier = OpRecord("(engine lanes)", 0, 0.0, engine_ns=busy)
    s = summarize(list(recs.values()) + [carrier], chip="unknown", peak_flops=1.0,
                  hbm_bytes_per_s=1.0, total_ns=total,
                  notes=["summarised from trace events only (no neuronExplorer section): HFU, "
                         "MFU, MBU, DMA bytes and memory peaks are unknown; DMA activity is the "
                         "union of the busy parts of the DMA lanes"])
    s.top_ops = [o for o in s.top_ops if o["name"] != "(engine lanes)"]
    # Lanes are merged and capped per op and per session, DMA bytes and FLOPs are not in the
    # rows: a verdict or advice from them could contradict the full summary of the same steps.
    s.verdict = NO_VERDICT
    s.recommendations = []
    from .phases import phase_breakdown
    s.phases = phase_breakdown(trace)
    return s
