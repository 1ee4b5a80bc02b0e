"""Traces that read like a Trainium trace (issue 17): Holistic Trace Analysis on scheduled,
multi-step profiles, sub-microsecond kernels kept exact, and the simulated-clock timeline."""

import glob
import json
import os
import sys
import logging

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import torch_neuronx
from neuron_sim.explorer import device_events
from neuron_sim.explorer.clock import CLOCK_KEY
from torch_neuronx import profiling

sys.path.insert(0, os.path.dirname(__file__))
from training import small_training_step  # noqa: E402

ACT = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _scheduled_profile(out):
    """wait=0, warmup=1, active=3 with tensorboard_trace_handler: ProfilerStep#1..#3 recorded.
    Returns (trace path, simulated ns of each recorded step)."""
    step = small_training_step()
    marks = []
    with profile(activities=ACT, schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        for _ in range(4):
            marks.append(torch_neuronx.device_time_ns())
            step()
            prof.step()
    marks.append(torch_neuronx.device_time_ns())
    files = glob.glob(str(out / "*.pt.trace.json"))
    assert len(files) == 1
    return files[0], [b - a for a, b in zip(marks[1:], marks[2:])]


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory):
    out = tmp_path_factory.mktemp("sched")
    path, step_ns = _scheduled_profile(out)
    wall = json.load(open(path))
    return out, path, step_ns, wall


def _hta(trace_dir):
    pytest.importorskip("hta", reason="needs holistictraceanalysis (the notebooks extra)")
    from hta.trace_analysis import TraceAnalysis
    logging.disable(logging.WARNING)       # HTA logs every parse step
    try:
        return TraceAnalysis(trace_dir=str(trace_dir))
    finally:
        logging.disable(logging.NOTSET)


def _busy_intervals(events):
    """The device's busy time as merged [start, end) intervals of the events (us)."""
    merged = []
    for e in sorted(events, key=lambda e: e["ts"]):
        start, end = e["ts"], e["ts"] + e["dur"]
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def test_hta_breakdowns_on_a_scheduled_simulated_clock_trace(scheduled):
    out, path, step_ns, wall = scheduled
    profiling.prepare_trace(path, clock="simulated")
    trace = json.load(open(path))
    assert trace[CLOCK_KEY]["clock"] == "simulated"
    assert trace[CLOCK_KEY]["syncs"] == "queue drains"
    steps = sorted(e["name"] for e in trace["traceEvents"]
                   if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    # device rows keep their simulated durations exactly (ns)
    ops, lanes = device_events(trace)
    wall_ops, _ = device_events(wall)
    assert sorted(round(e["dur"], 3) for e in ops) == sorted(round(e["dur"], 3) for e in wall_ops)
    assert lanes

    a = _hta(out)
    by_type, by_kernel = a.get_gpu_kernel_breakdown(visualize=False)
    assert by_type["kernel_type"].tolist() == ["COMPUTATION"]
    assert (by_kernel["sum (us)"] > 0).all() and (by_kernel["min (us)"] > 0).all()
    # HTA leaves the last step out: steps #1 and #2 are analysed; their kernel total is the
    # simulated time of those two steps (sub-microsecond kernels kept exact)
    simulated_us = (step_ns[0] + step_ns[1]) / 1e3
    assert by_kernel["sum (us)"].sum() == pytest.approx(simulated_us, rel=0.01)
    # HTA truncates each merged busy interval to whole microseconds: up to 1 us lost per
    # interval (about one per step; more where a sync leaves the device idle, as under load)
    busy = _busy_intervals(ops)
    assert simulated_us - len(busy) <= by_type["sum"].sum() <= simulated_us
    temporal = a.get_temporal_breakdown(visualize=False)
    assert temporal["compute_time(us)"].iloc[0] == pytest.approx(simulated_us, rel=0.01)
    # on the simulated clock the device is fed between the two steps' syncs
    assert temporal["idle_time_pctg"].iloc[0] < 20
    idle = a.get_idle_time_breakdown(visualize=False)[0]
    assert len(idle) > 0 and idle["idle_time"].sum() >= 0


def test_simulated_clock_places_host_rows_at_their_issue_and_device_rows_after(scheduled):
    _out, _path, _step_ns, wall = scheduled
    trace = json.loads(json.dumps(wall))
    profiling.profiler.set_clock(trace, "simulated")
    ev = trace["traceEvents"]
    launches = {e["args"]["External id"]: e for e in ev if profiling.profiler.is_launch_row(e)}
    ops, lanes = device_events(trace)
    by_stream = {}
    for e in ops:
        launch = launches.get(e["args"].get("External id"))
        if launch is not None:       # a device row never starts before its launch was issued
            assert e["ts"] >= launch["ts"] - 1e-3
        by_stream.setdefault((e["pid"], e["tid"]), []).append(e)
    for rows in by_stream.values():  # serial on a stream
        rows.sort(key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(rows, rows[1:]))
    # a lane moves with its op (its start stays inside the op's row)
    spans = [(e["ts"], e["ts"] + e["dur"], e["name"], e["pid"]) for e in ops]
    for lane in lanes[:200]:
        assert any(s - 1e-3 <= lane["ts"] <= t + 1e-3
                   and n == lane["args"]["op"] and p == lane["pid"] for s, t, n, p in spans)
    # the host spends the modelled issue cost, not the simulator's CPU time: the recorded
    # steps last about their simulated time on this clock, far less than on the wall clock
    step = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    wall_step = [e for e in wall["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert sum(e["dur"] for e in step) < 0.2 * sum(e["dur"] for e in wall_step)
    assert sum(e["dur"] for e in step) >= sum(e["dur"] for e in ops) * 0.99


def test_wall_clock_view_stays_available_and_says_so(scheduled, tmp_path):
    _out, _path, _step_ns, wall = scheduled
    p = tmp_path / "t.json"
    p.write_text(json.dumps(wall))
    profiling.prepare_trace(str(p))            # default: the wall clock, marked as such
    trace = json.load(open(p))
    assert trace[CLOCK_KEY]["clock"] == "wall"
    launches = [e for e in trace["traceEvents"] if profiling.profiler.is_launch_row(e)]
    assert launches and all(e["args"]["correlation"] == e["args"]["External id"] + (1 << 20)
                            for e in launches)
    with pytest.raises(ValueError, match="clock='device'.*simulated"):
        profiling.prepare_trace(str(p), clock="device")


def test_sub_microsecond_kernels_are_exact_in_hta(tmp_path):
    x = torch.randn(8, 8, device="neuron")
    torch.neuron.synchronize()
    with profile(activities=ACT, schedule=schedule(wait=0, warmup=0, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(3):
            x.fill_(1.0)
            x.add_(1.0)
            torch.neuron.synchronize()
            prof.step()
    path = glob.glob(str(tmp_path / "*.pt.trace.json"))[0]
    profiling.prepare_trace(path, clock="simulated")
    ops, _ = device_events(json.load(open(path)))
    assert ops
    a = _hta(tmp_path)
    _by_type, by_kernel = a.get_gpu_kernel_breakdown(visualize=False)
    assert (by_kernel["min (us)"] > 0).all()
    kept = [e["dur"] for e in ops]           # HTA keeps steps #0 and #1 of three
    assert by_kernel["sum (us)"].sum() == pytest.approx(sum(kept) * 2 / 3, rel=0.01)


@pytest.mark.parametrize("exporter", ["NeuronProfiler", "plain torch.profiler"])
def test_key_averages_lists_ops_not_engine_lanes(tmp_path, exporter):
    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler
    step = small_training_step()
    if exporter == "NeuronProfiler":
        cfg = NeuronConfig(profile_output_dir=str(tmp_path))
        exporter = NeuronProfiler(cfg)
        with profile(activities=ACT, experimental_config=cfg,
                     on_trace_ready=exporter.export_trace) as prof:
            step()
        trace = json.load(open(f"{exporter.last_output_dir}/trace.json"))
    else:
        with profile(activities=ACT) as prof:
            step()
        prof.export_chrome_trace(str(tmp_path / "t.json"))
        trace = json.load(open(tmp_path / "t.json"))
    ops, lanes = device_events(trace)
    assert lanes                                  # the trace keeps the lanes...
    lane_names = {e["name"] for e in lanes}
    rows = prof.key_averages()
    assert not lane_names & {r.key for r in rows}   # ...the table lists ops only
    device = [r for r in rows if r.device_type != torch.autograd.DeviceType.CPU]
    total = sum(r.self_device_time_total for r in device)
    assert total == pytest.approx(sum(e["dur"] for e in ops), rel=0.01)
    # as on CUDA, an op's device time shows on its device row and on the CPU op that launched
    # it; each of the two columns sums to the device total, lanes add nothing
    for kind in (device, [r for r in rows if r not in device]):
        assert sum(100 * r.self_device_time_total / total for r in kind) <= 100.0 + 1e-6
    assert "Self NEURON" in prof.key_averages().table(row_limit=5)


def test_simulated_clock_without_drain_records_syncs_at_step_ends(scheduled):
    """A trace placed in another process has no drain record: each ProfilerStep end is a sync,
    so a step's host row still covers the device work it issued."""
    from neuron_sim.explorer.clock import to_simulated_clock
    _out, _path, _step_ns, wall = scheduled
    trace = to_simulated_clock(json.loads(json.dumps(wall)))
    assert trace[CLOCK_KEY]["syncs"].startswith("ends of ProfilerStep rows")
    ops, _ = device_events(trace)
    steps = sorted((e for e in trace["traceEvents"]
                    if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    for a, b in zip(steps, steps[1:]):
        done = max(e["ts"] + e["dur"] for e in ops if e["ts"] < b["ts"])
        assert a["ts"] + a["dur"] >= done - 1e-3       # the step waited for its device work
