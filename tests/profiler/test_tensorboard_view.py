"""TensorBoard's profiler view (torch-tb-profiler, in the notebooks extra) reads our traces
(issue 17): a scheduled tensorboard_trace_handler profile, prepared on the simulated clock, gets the
Overview, Operator, Kernel and Trace views, each step's kernel time is the step's simulated device
time, and the kernels fill the step as they would on Trainium (not 0.2% as on the wall clock)."""

import glob
import json
import os
import sys

import pytest
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from torch_neuronx.profiling import prepare_trace

pytest.importorskip("torch_tb_profiler", reason="needs the notebooks extra (torch-tb-profiler)")
from torch_tb_profiler import consts  # noqa: E402
from torch_tb_profiler.profiler.data import RunProfileData  # noqa: E402
from torch_tb_profiler.profiler.run_generator import RunGenerator  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from training import small_training_step  # noqa: E402

ACT = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _scheduled_trace(tmp_path) -> str:
    """tensorboard_trace_handler's trace of a wait=0, warmup=1, active=2 profile."""
    step = small_training_step()
    with profile(activities=ACT, schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path / "run"))) as prof:
        for _ in range(3):
            step()
            prof.step()
    path, = glob.glob(str(tmp_path / "run" / "*.pt.trace.json"))
    return path


def test_tensorboard_profiler_views(tmp_path):
    path = _scheduled_trace(tmp_path)
    prepare_trace(path, clock="simulated")
    trace = json.load(open(path))
    device_us = sum(e["dur"] for e in trace["traceEvents"]
                    if (e.get("args") or {}).get("device_type") == "neuron")

    worker = consts.WORKER_PATTERN.match(os.path.basename(path)).group(1)
    data = RunProfileData.parse(worker, None, path, str(tmp_path / "cache"))
    run = RunGenerator(worker, None, data).generate_run_profile()
    assert {v.name for v in run.views} >= {"overall", "operator", "kernel", "trace"}
    steps = run.overview["steps"]["rows"]
    assert len(steps) == 2
    assert sum(r[1] for r in steps) == pytest.approx(device_us, rel=1e-6)   # kernel column
    kernel_share = run.overview["performance"][0]["children"][0]
    assert kernel_share["name"] == "Kernel" and kernel_share["extra"] > 90   # % of step time
    kernels = {r[0]: r[2] for r in run.kernel_table["data"]["rows"]}          # name -> calls
    assert kernels["aten::mm"] == 6 and "aten::addcdiv_" in kernels
    ops = {o["name"] for o in run.operation_table_by_name["data"]}
    assert "aten::mm" in ops and not any("nc_matmul" in o for o in ops)      # no lane rows


def _intersections(trace) -> list:
    """torch-tb-profiler's nesting check (op_tree.build_tree_relationship, in floats) over the
    host rows of each thread: the (parent, child) pairs it would reject."""
    from neuron_sim.explorer import is_lane_row, is_op_row
    device = {e.get("pid") for e in trace["traceEvents"] if is_op_row(e) or is_lane_row(e)}
    threads, bad = {}, []
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("pid") not in device:
            threads.setdefault((e["pid"], e["tid"]), []).append(e)
    for rows in threads.values():
        stack = [(float("-inf"), float("inf"), None)]
        for e in sorted(rows, key=lambda e: (e["ts"], -(e["ts"] + e["dur"]))):
            s, t = e["ts"], e["ts"] + e["dur"]
            while not s < stack[-1][1]:
                stack.pop()
            if t <= stack[-1][1]:
                stack.append((s, t, e["name"]))
            else:
                bad.append((stack[-1][2], e["name"]))
    return bad


def test_host_rows_nest_in_floating_point():
    """3-decimal microseconds are not exact in binary: 0.002 + 1.0 > 0.001 + 1.001 and
    5.001 + 0.001 > 5.002. compact_trace trims such rows by at most a nanosecond, so TensorBoard
    builds its op tree without "ranges on the same thread should not intersect"; device rows and
    real overlaps are left alone."""
    from neuron_sim.explorer import compact_trace

    def row(name, ts, dur, tid=1, pid=1, **args):
        return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                "args": args}
    trace = {"traceEvents": [
        row("parent", 0.001, 1.001), row("child", 0.002, 1.0),           # child past parent
        row("a", 5.001, 0.001), row("b", 5.002, 0.5),                    # a's end past b's start
        row("outer", 5.0, 1.0), row("overlap", 5.9, 0.5, tid=2),         # another thread
        row("x", 10.0, 1.0, tid=3), row("y", 10.5, 1.0, tid=3),          # a real overlap
        row("aten::mm", 0.001, 1.001, pid=0, device_type="neuron"),      # device rows
        row("aten::mm", 0.002, 1.0, pid=0, device_type="neuron")]}
    before = _intersections(trace)
    assert ("parent", "child") in before and ("a", "b") in before
    durs = {e["name"]: e["dur"] for e in trace["traceEvents"]}
    compact_trace(trace)
    assert _intersections(trace) == [("x", "y")]
    after = {e["name"]: e["dur"] for e in trace["traceEvents"]}
    assert all(0 <= durs[n] - after[n] <= 0.001 + 1e-12 for n in durs)
    assert after["x"] == durs["x"] and [e["dur"] for e in trace["traceEvents"][-2:]] == [1.001, 1.0]


def test_scheduled_profile_has_no_intersecting_host_rows(tmp_path):
    path = _scheduled_trace(tmp_path)
    for clock in ("wall", "simulated"):
        copy = tmp_path / f"{clock}.json"
        copy.write_text(open(path).read())
        prepare_trace(str(copy), clock=clock)
        assert _intersections(json.load(open(copy))) == [], clock
