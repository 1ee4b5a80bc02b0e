"""While torch.profiler records the neuron device, give every drained op its engine lanes and an
Explorer record.

`cost.LoweredCostModel.__call__` calls `on_drain(model, batch, charges)` after timing a batch;
`charges` (None when the profiler is not logging) is the drain's own record of each op
(`cost.Charge`), so nothing here re-derives the cost model's decisions or lowers again. An op's
lanes come from the program its lowering timed (`Timing.program`): a "Runtime" span for the eager
launch, then each engine's busy spans (capped per lane and per op), stretched to the op's time
when the lowering extrapolated it or Adaptive Eager Execution fused it (the labels say so).
Roofline-estimated ops get one "Estimated" span, host copies one "PCIe" span, other work timed as
a whole (collectives, NKI kernels) one "Graph" span, a compiled graph one span per engine
(`_graph`): no instruction timeline exists for them here."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass

from neuron_sim.explorer import OpRecord, lane_spans
from neuron_sim.lower import normalize_name

from .. import _C
from ..settings import PROFILING_SETTINGS as LANE_SETTINGS


@dataclass
class LaneOptions:
    """The lane settings (defaults and help: settings.PROFILING_SETTINGS), in their order."""
    enabled: bool
    max_spans_per_lane: int
    max_spans_per_op: int
    dma: str
    max_rows: int


OPTIONS = LaneOptions(*(s.read() for s in LANE_SETTINGS))

# Which argument of a matmul-family op is the weight (a positional heuristic; see
# neuron_sim/explorer/README.md, "DMA bytes by kind").
WEIGHT_ARG = {"aten::mm": 1, "aten::addmm": 2, "aten::linear": 1, "aten::matmul": 1,
              "aten::convolution": 1, "aten::embedding": 0, "aten::addmv": 1, "aten::mv": 0}
_MAX_ENTRIES = 2_000_000     # session bound: a forgotten profiler must not grow without limit
_MAX_BATCH_OPS = 20_000      # latest drained ops kept for re-timing advice (~30 demo GPT steps)
_MAX_STORAGES = 65_536       # storages whose computed ranges a session keeps (demo GPT: ~950)


class _Session:
    """Ops drained while the profiler logged: [(name, ns, OpRecord)], in drain order."""

    def __init__(self):
        self.start()
        self.open = False

    def start(self):
        """A new profiling session: nothing of the last one is kept."""
        self.entries = []
        self.computed = {}       # storage -> [(first, end)] elements device ops wrote (bounded)
        self.open = True
        self.lane_rows = 0       # rows attached so far (bounded by LaneOptions.max_rows)
        self.lanes_dropped = 0   # ops left without lanes once the budget was spent
        self.drains = []         # wall times (ns) of queue drains: where the host synchronised
        self.batches = deque()   # latest [(batch, ns per op)] drained, for advice.py's re-timing
        self.batch_ops = 0


SESSION = _Session()
_programs: dict = {}         # (op key, chip, lnc) -> (OpProgram | None, spans, record)
_rows: dict = {}             # (program key, ns, launch, how) -> lane rows (steady state: lookups)


def on_drain(model, batch, charges) -> None:
    if charges is None:           # not profiling
        SESSION.open = False
        return
    if not SESSION.open:          # first drain of a new profiling session
        SESSION.start()
        _rows.clear()
    if len(SESSION.drains) < _MAX_ENTRIES:
        SESSION.drains.append(time.time_ns())    # for the simulated-clock timeline
    SESSION.batches.append((batch, [c.ns for c in charges]))
    SESSION.batch_ops += len(batch)
    while SESSION.batch_ops > _MAX_BATCH_OPS and len(SESSION.batches) > 1:
        SESSION.batch_ops -= len(SESSION.batches.popleft()[0])
    if len(SESSION.entries) > _MAX_ENTRIES:
        return
    for i, charge in enumerate(charges):
        ns = int(charge.ns)
        if ns <= 0:
            continue                            # a view: no program, no time
        op = batch[i]
        if charge.kind == "program":
            _emit(model, op, charge)
            continue
        seq, name = op.seq, op.name
        _written(op.outputs, by_device=charge.kind != "host")
        cost = _GRAPHS.get(name)       # a compiled graph
        if cost is not None:
            _graph(seq, name, ns, cost, model.chip.sbuf_partitions)
            continue
        if charge.kind == "host":
            lane, label = "PCIe", f"{name.split('::')[1]} {charge.host_bytes / 1e6:.2f} MB"
        else:
            lane, label = "Graph", f"{name} (timed as a whole: no engine detail)"
        _lanes(seq, [_span(lane, 0, ns, label)])
        SESSION.entries.append((name, ns, OpRecord(name, 1, float(ns))))


_GRAPHS: dict = {}           # launch name of a compiled graph -> its GraphCost


def register_graph(launch_name: str, cost) -> None:
    """The torch.compile backend registers each graph's GraphCost before its first launch."""
    _GRAPHS[launch_name] = cost


def _graph(seq, name, ns, cost, partitions) -> None:
    """A compiled graph: its cost model gives per-engine totals, DMA and spill bytes and the SBUF
    peak, but no instruction timeline, so each engine gets one span over the program labelled
    with its busy share (honest aggregation, like a merged span)."""
    launch = float(min(cost.launch_ns, ns))
    body = max(ns - launch, 1.0)
    eng = {k: float(v) for k, v in cost.engine_busy_ns.items()}
    spill = float(cost.spill_bytes)
    rec = OpRecord(name, 1, float(ns), launch, eng, tensor_flops=float(cost.tensor_flops),
                   model_flops=float(cost.model_flops),
                   dma_bytes={"inputs": max(float(cost.dma_bytes) - spill, 0.0),
                              "spill_save": spill / 2, "spill_reload": spill / 2},
                   sbuf_peak_bytes_per_partition=cost.sbuf_peak_bytes // partitions)
    SESSION.entries.append((name, ns, rec))
    rows = [_span("Runtime", 0, launch, "launch")] if launch >= 1 else []
    for lane, busy in eng.items():
        if busy > 0:
            rows.append(_span(lane, launch, body, f"{name.split('.', 1)[-1]}: {lane} busy "
                              f"{100 * busy / body:.0f}% (compiled graph, "
                              f"{cost.cost_source or 'graph'} cost: engine totals only)"))
    _lanes(seq, rows)


def _span(lane, start_ns, duration_ns, label) -> tuple:
    """A lane row as `_C._record_lanes` takes it: whole ns, at least 1 ns long."""
    return (lane, int(round(start_ns)), max(1, int(round(duration_ns))), label)


def _lanes(seq, spans) -> None:
    if not (OPTIONS.enabled and spans):
        return
    if SESSION.lane_rows + len(spans) > OPTIONS.max_rows:
        SESSION.lanes_dropped += 1
        return
    SESSION.lane_rows += len(spans)
    _C._record_lanes(seq, spans)


def _program(model, key, name, t):
    pk = (key, model.chip.name, model.lnc)
    hit = _programs.get(pk)
    if hit is not None:
        return hit
    prog = t.program
    spans = _choose(lane_spans(prog.result, max_spans=OPTIONS.max_spans_per_lane,
                               dma=OPTIONS.dma)) if prog is not None else []
    hit = _programs[pk] = (prog, spans, _base_record(name, prog, t))
    return hit


def _choose(spans):
    """At most max_spans_per_op spans: compute lanes first, then DMA lanes by busy time."""
    cap = OPTIONS.max_spans_per_op
    if len(spans) <= cap:
        return spans
    compute, dma = [], {}
    for s in spans:
        if s.lane.startswith("DMA"):
            dma.setdefault(s.lane, []).append(s)
        else:
            compute.append(s)
    keep = []
    for lane in sorted(dma.values(), key=lambda ss: -sum(s.duration_ns for s in ss)):
        if len(compute) + len(keep) + len(lane) > cap:
            break
        keep.extend(lane)
    return compute[:cap] + keep


def _base_record(name, prog, t) -> OpRecord:
    """One call's record without region context (HBM reads are classified per call): the
    program's figures are the op's already (the lowering scaled them to the op's Timing)."""
    if prog is None:
        return OpRecord(name, 1, 0.0, 0.0, dict(t.engine_ns), t.flops,
                        dma_bytes={"inputs": t.hbm_bytes}, estimated=int(bool(t.estimated)))
    dma = {"outputs": prog.write_bytes, "spill_save": prog.spill_save_bytes,
           "spill_reload": prog.spill_reload_bytes}
    return OpRecord(name, 1, 0.0, 0.0, dict(t.engine_ns), t.flops, prog.model_flops,
                    prog.transpose_ns, dma, prog.sbuf_peak_bytes_per_partition,
                    prog.psum_peak_bytes_per_partition)


def _emit(model, op, charge) -> None:
    key, t, ns = charge.key, charge.timing, int(charge.ns)
    how = "AEE-fused" if charge.group >= 0 else None
    seq, name, args, outputs = op.seq, op.name, op.args, op.outputs
    prog, spans, base = _program(model, key, name, t)
    launch = min(float(charge.launch_ns), float(ns))
    # field by field: dataclasses.replace(base, ...) takes ~1.3 us more per profiled op
    rec = OpRecord(name, 1, float(ns), launch, dict(base.engine_ns), base.tensor_flops,
                   base.model_flops, base.transpose_ns, dict(base.dma_bytes),
                   base.sbuf_peak_bytes_per_partition, base.psum_peak_bytes_per_partition,
                   base.estimated)
    _classify_reads(rec, prog.read_bytes_by_arg if prog is not None else {}, name, args)
    _written(outputs, by_device=True)
    SESSION.entries.append((name, ns, rec))
    if not OPTIONS.enabled or SESSION.lane_rows >= OPTIONS.max_rows:
        SESSION.lanes_dropped += OPTIONS.enabled
        return
    rk = (key, ns, int(round(launch)), how)
    rows = _rows.get(rk)
    if rows is None:
        if len(_rows) > 50_000:
            _rows.clear()
        rows = _rows[rk] = _lane_rows(name, prog, spans, ns, launch, how)
    _lanes(seq, rows)


def _lane_rows(name, prog, spans, ns, launch, how) -> list:
    # The launch gets its own span only for a standalone op: in an AEE group it is shared.
    rows = [_span("Runtime", 0, launch, "launch")] if launch >= 1 and not how else []
    body = ns - launch
    if prog is None:
        rows.append(_span("Estimated", launch, body, f"{name}: roofline estimate, no program"))
    elif spans:
        scale = body / prog.result.total_ns if prog.result.total_ns else 1.0
        note = []
        if prog.extrapolated:
            note.append("representative blocks, stretched")   # no numbers: keeps
        elif how:                                                 # key_averages rows few
            note.append(how)
        suffix = f" [{'; '.join(note)}]" if note else ""
        rows.extend(_span(s.lane, launch + s.offset_ns * scale, s.duration_ns * scale,
                          s.label + suffix) for s in spans)
    return rows


def _classify_reads(rec, reads, name, args) -> None:
    w = WEIGHT_ARG.get(normalize_name(name))
    for j, b in reads.items():
        a = args[j] if 0 <= j < len(args) else None
        if j == w:
            kind = "weights"
        elif _computed(a):
            kind = "intermediates"
        else:
            kind = "inputs"
        rec.dma_bytes[kind] = rec.dma_bytes.get(kind, 0.0) + b


_LENGTHS: dict = {}          # (sizes, strides) -> elements from a tensor's first to past its last


def _extent(t):
    """[first, end) elements of its storage a device tensor covers; None for a CPU scalar or a
    tensor without storage. cost.extent once per layout: it is ~1 us a call, per read here."""
    if type(t) is not _C.TensorDesc or not (t.on_neuron and t.storage):
        return None
    layout = (t.sizes, t.strides)
    length = _LENGTHS.get(layout)
    if length is None:
        from ..cost import extent
        first, end = extent(t)
        length = _LENGTHS[layout] = end - first
    return t.offset, t.offset + length


def _computed(t) -> bool:
    """Does `t` read memory a device op of the session wrote, through any view of it?"""
    span = _extent(t)
    if span is not None:
        for a, b in SESSION.computed.get(t.storage, ()):
            if a < span[1] and span[0] < b:
                return True
    return False


def _written(outputs, by_device) -> None:
    """A write to device memory: a device op's output joins what device ops computed; a host
    copy's replaces it with input data. No free reaches the profiler and the allocator hands a
    freed storage to the next tensor, so a storage's facts change only by writes: a new tensor
    there is first written (by an op or a copy) before anything reads it."""
    for o in outputs:
        span = _extent(o)
        if span is None:
            continue
        spans = SESSION.computed.pop(o.storage, None)
        if spans is None:
            spans = [span] if by_device else None
        elif not (by_device and spans == [span]):     # else: a tensor's own range written again
            spans = _rewritten(spans, *span, by_device)
        if spans:
            SESSION.computed[o.storage] = spans     # re-inserted: the oldest written go first
    if len(SESSION.computed) > _MAX_STORAGES:
        for k in list(SESSION.computed)[:_MAX_STORAGES // 2]:
            del SESSION.computed[k]


def _rewritten(spans, lo, hi, by_device) -> list:
    """`spans` (disjoint [first, end) ranges device ops wrote) after a write of [lo, hi)."""
    kept = []
    for a, b in spans:
        if b < lo or hi < a:
            kept.append((a, b))
        elif by_device:
            lo, hi = min(a, lo), max(b, hi)         # joined into one range
        else:
            kept.extend(r for r in ((a, lo), (hi, b)) if r[0] < r[1])
    return kept + [(lo, hi)] if by_device else kept


def session_records(device_rows=None) -> list:
    """The OpRecords of the current (or last) profiling session, merged per op name. With
    `device_rows` [(name, ns), ...] from a trace, only the latest entries matching those rows are
    used (a warm-up or an earlier session drained under the same logging flag is left out)."""
    entries = SESSION.entries
    if device_rows is not None:
        want = Counter(device_rows)
        picked = []
        for name, ns, rec in reversed(entries):
            if want[(name, ns)] > 0:
                want[(name, ns)] -= 1
                picked.append((name, ns, rec))
        entries = picked[::-1]
    merged = {}
    for name, _ns, rec in entries:
        if name not in merged:
            merged[name] = OpRecord(name)
        merged[name].add(rec)
    return list(merged.values())


def session_programs() -> dict:
    """{op name: OpProgram} of the ops profiled so far (the latest program per name): the
    representative program behind each op's lanes, for per-op views (notebooks/02)."""
    return {base.name: prog for prog, _spans, base in _programs.values() if prog is not None}
