"""Device time by training phase (forward, backward, optimizer), from a trace's own annotations.

Each neuron device row is linked to the host row that launched it (`neuron::launch`, same
External id, on the issuing thread). The launch's place on the host decides the phase:

- optimizer: inside `Optimizer.step#<class>.step` or `Optimizer.zero_grad#<class>.zero_grad`
  (the annotations torch.optim writes while the profiler records);
- backward: inside `autograd::engine::evaluate_function: ...`, or anywhere on a thread that runs
  such rows (the device's autograd thread);
- forward: any other launch (the forward pass, the loss, and whatever else the step does outside
  backward and the optimizer);
- other: a device row without a launch row (a host copy, a trace from elsewhere).

The result is plain data: {phase: {"ns", "count", "ops": {name: ns}}} plus, under "optimizer",
the optimizer class names the annotations give ("AdamW")."""

from __future__ import annotations

import bisect

from .trace import LAUNCH_CATEGORY

PHASES = ("forward", "backward", "optimizer", "other")
OPTIMIZER_ANNOTATIONS = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_ROW = "autograd::engine::evaluate_function"


def _scan(events):
    """One pass: (device op rows, launches {External id: (pid, tid, ts)}, spans {(pid, tid):
    sorted [(ts, end, phase)]}, backward threads, optimizer class names)."""
    ops, launches, spans, bwd_threads, classes = [], {}, {}, set(), []
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        if args.get("device_type") == "neuron":          # trace.is_op_row, inlined: hot loop
            ops.append(e)
            continue
        name = e.get("name", "")
        where = (e.get("pid"), e.get("tid"))
        if e.get("cat") == LAUNCH_CATEGORY and "External id" in args:
            launches[args["External id"]] = where + (float(e["ts"]),)
            continue
        if name.startswith(OPTIMIZER_ANNOTATIONS):
            phase = "optimizer"
            if name.startswith("Optimizer.step#"):
                cls = name.split("#", 1)[1].split(".", 1)[0]
                if cls not in classes:
                    classes.append(cls)
        elif name.startswith(BACKWARD_ROW):
            phase = "backward"
            bwd_threads.add(where)
        else:
            continue
        ts = float(e["ts"])
        spans.setdefault(where, []).append((ts, ts + float(e.get("dur", 0.0)), phase))
    for v in spans.values():
        v.sort()
    return ops, launches, spans, bwd_threads, classes


def _phase_of(launch, spans, bwd_threads) -> str:
    """The phase of a device row whose launch is `launch` (pid, tid, ts); "other" without one."""
    if launch is None:
        return "other"
    where, ts = launch[:2], launch[2]
    found = "backward" if where in bwd_threads else "forward"
    rows = spans.get(where)
    if rows:
        i = bisect.bisect_right(rows, (ts, float("inf"), "~")) - 1
        # annotations of one thread barely nest (an optimizer step holds no autograd rows):
        # a few steps back find the enclosing one
        for s, end, phase in rows[max(i - 8, 0):i + 1][::-1]:
            if s <= ts <= end:
                if phase == "optimizer":
                    return phase
                found = phase
    return found


def row_phases(trace: dict) -> tuple:
    """([(device op row, phase)] in trace order, [optimizer class names the trace gives])."""
    ops, launches, spans, bwd_threads, classes = _scan(trace.get("traceEvents", []))
    return [(e, _phase_of(launches.get(e["args"].get("External id")), spans, bwd_threads))
            for e in ops], classes


def phase_breakdown(trace: dict | None = None, *, phased=None) -> dict:
    """{phase: {"ns", "count", "ops": {op name: ns}}} of the trace's device rows (every phase
    present, zeros included), and "optimizer_classes": the optimizers the trace names.
    `phased`: row_phases(trace), when the caller has it already."""
    rows, classes = phased if phased is not None else row_phases(trace)
    out = {p: {"ns": 0.0, "count": 0, "ops": {}} for p in PHASES}
    for e, phase in rows:
        ns = float(e.get("dur", 0.0)) * 1e3
        d = out[phase]
        d["ns"] += ns
        d["count"] += 1
        d["ops"][e["name"]] = d["ops"].get(e["name"], 0.0) + ns
    out["optimizer_classes"] = list(classes)
    return out


def format_phases(phases: dict, total_ns: float) -> str:
    """One line: each phase's device time and share of `total_ns`."""
    parts = []
    for p in PHASES:
        d = phases.get(p) or {}
        if d.get("ns") or p != "other":
            share = 100.0 * d.get("ns", 0.0) / total_ns if total_ns else 0.0
            parts.append(f"{p} {d.get('ns', 0.0) / 1e6:.3f} ms ({share:.0f}%)")
    return "  ".join(parts)
