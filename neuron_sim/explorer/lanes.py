"""Per-engine lanes of one simulated program: each in-order stream (TensorE, VectorE, ScalarE,
GpSimd, SyncE and the 16 DMA queues) as a short list of busy intervals, small enough for a
torch.profiler trace.

An instruction occupies its stream from `start_ns` for `busy_ns` (compute) or from its data start
to its end (DMA), as `Result.engine_busy_ns` counts them. Consecutive instructions of a stream
are merged into one span when the idle gap between them is at most a threshold; the threshold is
chosen per stream so that no stream has more than `max_spans` spans (the largest gaps stay
visible). Each span's label says what ran in it and how busy the span was, so aggregation never
hides idle time silently.

Reads only the Result's records (principle 9): the same program gives the same lanes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engines import N_COMPUTE_STREAMS, Engine, ENGINE_NAMES
from ..kernels.timing import _union_length

MAX_SPANS_PER_LANE = 32        # default cap per stream and op
MIN_GAP_NS = 2.0               # shorter idle gaps are merged: invisible, and below the ~1 ns
                               # resolution of trace timestamps in microseconds
DMA_LANES = ("queues", "one")  # one lane per DMA queue, or all queues folded into "DMA"


@dataclass(frozen=True)
class LaneSpan:
    lane: str          # "TensorE", "VectorE", "ScalarE", "GpSimd", "SyncE", "DMA q3" or "DMA"
    offset_ns: float   # from the program's start
    duration_ns: float
    label: str         # e.g. "nc_matmul x12, 91% busy"


def lane_name(stream: int, dma: str = "queues") -> str:
    if stream < N_COMPUTE_STREAMS:
        return ENGINE_NAMES[Engine(stream)]
    return "DMA" if dma == "one" else f"DMA q{stream - N_COMPUTE_STREAMS}"


_ORDER = ("Runtime", *ENGINE_NAMES.values())


def lane_order(name: str) -> tuple:
    """Sort key: the engines in hardware order, then DMA queues by number, then the rest."""
    if name.startswith("DMA q") and name[5:].isdigit():
        return (len(_ORDER), int(name[5:]), name)
    return (_ORDER.index(name) if name in _ORDER else len(_ORDER) + 1, 0, name)


def _intervals(result):
    """(stream, start, end, opname index) of every instruction with non-zero occupancy."""
    c = result.program.cols
    dma = c["engine"] == Engine.DMA
    start = np.where(dma, result.data_start_ns, result.start_ns)
    end = np.where(dma, result.end_ns, result.start_ns + result.busy_ns)
    keep = end > start
    return c["stream"][keep], start[keep], end[keep], c["op"][keep]


def _merge(start, end, ops, opnames, max_spans, lane):
    """Busy intervals of one stream (sorted by start) merged down to at most max_spans."""
    order = np.argsort(start, kind="stable")
    start, end, ops = start[order], end[order], ops[order]
    reach = np.maximum.accumulate(end)
    gaps = start[1:] - reach[:-1]                      # idle time before instruction k+1
    if len(gaps) + 1 > max_spans:
        # keep the (max_spans - 1) largest gaps as breaks; ties break towards earlier gaps
        cut = np.sort(gaps)[::-1][max_spans - 2] if max_spans > 1 else np.inf
        breaks = (gaps > cut) & (gaps > MIN_GAP_NS)
        if breaks.sum() < max_spans - 1 and cut > MIN_GAP_NS:   # equal gaps at the cut: some
            extra = np.nonzero(gaps == cut)[0][:max_spans - 1 - int(breaks.sum())]
            breaks[extra] = True
    else:
        breaks = gaps > MIN_GAP_NS
    bounds = np.concatenate(([0], np.nonzero(breaks)[0] + 1, [len(start)]))
    spans = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        s0, s1 = float(start[a]), float(reach[b - 1])
        busy = float(_union_length(start[a:b], end[a:b]))
        names, counts = np.unique(ops[a:b], return_counts=True)
        top = sorted(zip(counts, names), key=lambda x: (-x[0], x[1]))[:2]
        what = ", ".join(f"{opnames[int(n)]} x{int(k)}" for k, n in top)
        if len(names) > 2:
            what += f", +{len(names) - 2} more"
        pct = 100.0 * busy / (s1 - s0) if s1 > s0 else 100.0
        label = what if pct >= 99.5 else f"{what}, {pct:.0f}% busy"
        spans.append(LaneSpan(lane, s0, s1 - s0, label))
    return spans


def lane_spans(result, *, max_spans: int = MAX_SPANS_PER_LANE, dma: str = "queues") -> list:
    """Busy spans per stream of a simulated program (a `neuron_sim.Result`), at most `max_spans`
    per lane, ordered by lane then time. `dma="one"` folds the DMA queues into one "DMA" lane."""
    if dma not in DMA_LANES:
        raise ValueError(f"dma={dma!r}: expected one of {DMA_LANES}")
    if max_spans < 1:
        raise ValueError(f"max_spans={max_spans}: expected at least 1 span per lane")
    stream, start, end, ops = _intervals(result)
    names = np.array([lane_name(int(s), dma) for s in stream], dtype=object)
    out = []
    for lane in sorted(set(names), key=lane_order):
        m = names == lane
        out.extend(_merge(start[m], end[m], ops[m], result.program.opnames, max_spans, lane))
    return out
