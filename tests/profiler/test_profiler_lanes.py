"""torch.profiler on the simulated device: per-engine lanes, key_averages, TorchNeuron's
NeuronConfig / NeuronProfiler surface and output layout, TensorBoard handler, HTA."""

import glob
import json
import os
import socket

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from neuron_sim.explorer import device_events
from torch_neuronx import profiling
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode

ACT = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
ENGINE_LANES = {"TensorE", "VectorE", "ScalarE", "GpSimd"}


def _step(x, w):
    return torch.nn.functional.gelu(x @ w).softmax(-1) * 2


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(256, 512, device="neuron")
    w = torch.randn(512, 512, device="neuron")
    _step(x, w)
    torch.neuron.synchronize()
    return x, w


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    x, w = _inputs()
    with profile(activities=ACT) as prof:
        for _ in range(2):
            _step(x, w)
        torch.neuron.synchronize()
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    prof.export_chrome_trace(str(path))
    return prof, json.loads(path.read_text())


def _device(trace):
    return device_events(trace)


def test_engine_lanes_are_named_rows_inside_their_op(traced):
    _prof, trace = traced
    ops, lanes = _device(trace)
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == 0}
    assert ENGINE_LANES & names and any(n.startswith("DMA q") for n in names)
    assert any(e["name"].endswith("[AEE-fused]") for e in lanes)   # AEE groups say so
    assert {e["args"]["lane"] for e in lanes} <= names
    assert all(e["name"] and e["dur"] > 0 for e in lanes)
    by_op = {}
    for e in lanes:
        by_op.setdefault(e["args"]["op"], []).append(e)
    assert {"aten::mm", "aten::gelu", "aten::_softmax"} <= set(by_op)
    first, last = min(e["ts"] for e in ops), max(e["ts"] + e["dur"] for e in ops)
    # kineto widens annotation rows by 1 ns each side, and a float of ~5e12 us resolves ~1 ns
    slack = 3e-3
    assert all(first - slack <= e["ts"] and e["ts"] + e["dur"] <= last + slack for e in lanes)
    mm = [e for e in lanes if e["args"]["op"] == "aten::mm"]
    assert any(e["args"]["lane"] == "TensorE" and "nc_matmul" in e["name"] for e in mm)


def test_lanes_are_capped_per_op(traced):
    _prof, trace = traced
    ops, lanes = _device(trace)
    opts = profiling.lane_options
    per_lane_cap = opts.max_spans_per_lane
    assert len(lanes) <= len(ops) * (opts.max_spans_per_op + 1)      # + the launch span
    counts = {}
    for e in lanes:
        k = (e["ts"] // 1, e["args"]["op"], e["args"]["lane"])
        counts[k] = counts.get(k, 0) + 1
    assert max(counts.values()) <= per_lane_cap


def test_key_averages_device_time_per_op(traced):
    prof, trace = traced
    ops, _lanes = _device(trace)
    rows = {e.key: e for e in prof.key_averages()}
    mm_us = sum(e["dur"] for e in ops if e["name"] == "aten::mm")
    assert rows["aten::mm"].device_time_total == pytest.approx(mm_us, abs=1e-3)
    for name in ("aten::gelu", "aten::_softmax"):       # lanes never add to an op's time
        assert rows[name].device_time_total == pytest.approx(
            sum(e["dur"] for e in ops if e["name"] == name), abs=1e-3)


def test_flows_link_device_rows_to_cpu_ops(traced):
    _prof, trace = traced
    ops, _ = _device(trace)
    flows = {e["id"] for e in trace["traceEvents"] if e.get("cat") == "ac2g"}
    assert all(e["args"]["External id"] in flows for e in ops)


def test_explorer_summary_of_the_region(traced):
    prof, _trace = traced
    s = profiling.explorer_summary(prof)
    assert s.top_ops[0]["name"] == "aten::mm"
    assert {o["name"] for o in s.top_ops} >= {"aten::mm", "aten::gelu"}
    assert s.total_ns == pytest.approx(sum(o["device_ns"] for o in s.top_ops))
    assert 0 < s.hfu < 1 and 0 < s.mbu < 1 and s.dma_bytes["weights"] > 0
    assert s.sbuf_peak_bytes_per_partition > 0 and s.hbm_peak_bytes > 0
    assert s.verdict and "total device time" in s.text()


def test_neuron_profiler_output_layout(tmp_path):
    x, w = _inputs()
    cfg = NeuronConfig(modes=list(ProfileMode), profile_output_dir=str(tmp_path),
                       capture_enabled_for_nc="0")
    exporter = NeuronProfiler(cfg)
    with profile(activities=ACT, experimental_config=cfg, on_trace_ready=exporter.export_trace):
        _step(x, w)
        torch.neuron.synchronize()
    out = exporter.last_output_dir
    host = socket.gethostname().split(".")[0]
    assert os.path.dirname(out) == os.path.join(str(tmp_path), f"{host}_pid_{os.getpid()}")
    files = set(os.listdir(out))
    assert {"trace.json", "modes.json", "device_summary.json", "device_summary.txt",
            "cpu_util.json", "host_mem.json"} <= files
    assert not any(f.endswith((".ntff", ".neff", ".pb")) for f in files)   # no fake captures
    modes = json.load(open(os.path.join(out, "modes.json")))
    assert modes["simulated"] and "no .neff/.ntff" in modes["modes"]["DEVICE"]
    trace = json.load(open(os.path.join(out, "trace.json")))
    assert trace["neuronExplorer"]["summary"]["top_ops"][0]["name"] == "aten::mm"
    from neuron_sim.cli import main
    assert main(["explorer", os.path.join(out, "trace.json")]) == 0


def test_neuron_config_fields_and_errors():
    cfg = NeuronConfig()
    assert cfg.modes == [ProfileMode.DEVICE, ProfileMode.RUNTIME] and cfg.precache_node_info
    assert NeuronConfig(capture_enabled_for_nc="0,1,2-5").cores == {0, 1, 2, 3, 4, 5}
    assert NeuronConfig(modes=["cpu_util"]).modes == [ProfileMode.CPU_UTIL]
    assert NeuronConfig(capture_enabled_for_nc=3).cores == {3}
    # One core-list rule with NEURON_RT_VISIBLE_CORES (instance.parse_cores): empty parts,
    # reversed ranges and negative cores are errors that name the option.
    for spec, message in (("a-b", "'a' is not a core index"), ("0,,1", "'' is not a core index"),
                          ("5-2", "range 5-2 is empty"), ("-1", "core -1 does not exist")):
        with pytest.raises(ValueError, match=f"capture_enabled_for_nc='{spec}': {message}"):
            NeuronConfig(capture_enabled_for_nc=spec)
    with pytest.raises(ValueError, match="max_events_per_nc"):
        NeuronConfig(max_events_per_nc=0)


def test_tensorboard_trace_handler_with_schedule(tmp_path):
    x, w = _inputs()
    with profile(activities=ACT, schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(4):
            _step(x, w)
            torch.neuron.synchronize()
            prof.step()
    files = glob.glob(str(tmp_path / "*.pt.trace.json"))
    assert len(files) == 1
    trace = json.load(open(files[0]))
    ops, lanes = _device(trace)
    assert sum(e["name"] == "aten::mm" for e in ops) == 2 and lanes
    assert any(e["name"].startswith("ProfilerStep#") for e in trace["traceEvents"])
    profiling.prepare_trace(files[0])                 # analysis fields for HTA, in place
    ops, _lanes = _device(json.load(open(files[0])))
    assert all(e["args"]["stream"] == e["tid"] for e in ops)


def test_holistic_trace_analysis_kernel_breakdown(tmp_path):
    pytest.importorskip("hta", reason="needs holistictraceanalysis (the notebooks extra)")
    from hta.trace_analysis import TraceAnalysis
    x, w = _inputs()
    cfg = NeuronConfig(profile_output_dir=str(tmp_path / "out"))
    exporter = NeuronProfiler(cfg)
    with profile(activities=ACT, experimental_config=cfg, on_trace_ready=exporter.export_trace):
        for _ in range(2):
            _step(x, w)
        torch.neuron.synchronize()
    analysis = TraceAnalysis(trace_dir=exporter.last_output_dir)
    by_type, by_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
    assert by_type["kernel_type"].tolist() == ["COMPUTATION"]
    assert {"aten::mm", "aten::gelu"} <= set(by_kernel["name"])


def test_lanes_can_be_turned_off(tmp_path):
    x, w = _inputs()
    profiling.lane_options.enabled = False
    try:
        with profile(activities=ACT) as prof:
            _step(x, w)
            torch.neuron.synchronize()
    finally:
        profiling.lane_options.enabled = True
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    ops, lanes = _device(json.load(open(tmp_path / "t.json")))
    assert ops and not lanes


def test_standalone_ops_show_their_launch(tmp_path):
    import torch_neuronx
    x, w = _inputs()
    torch_neuronx.set_adaptive_eager(False)
    try:
        with profile(activities=ACT) as prof:
            _step(x, w)
            torch.neuron.synchronize()
    finally:
        torch_neuronx.set_adaptive_eager(None)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    ops, lanes = _device(json.load(open(tmp_path / "t.json")))
    launches = [e for e in lanes if e["args"]["lane"] == "Runtime"]
    assert len(launches) == len(ops) and all(e["name"] == "launch" for e in launches)
    assert not any("AEE" in e["name"] for e in lanes)


def test_compiled_graph_has_engine_lanes_and_a_summary(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                            torch.nn.Linear(512, 256)).to("neuron")
    cm = torch.compile(m, backend="neuron")
    x = torch.randn(64, 256, device="neuron")
    with torch.no_grad():
        cm(x).sum().item()
        with profile(activities=ACT) as prof:
            cm(x)
            torch.neuron.synchronize()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    ops, lanes = _device(json.load(open(tmp_path / "t.json")))
    assert [e["name"] for e in ops] == ["neuron::graph.model_0_inference_0"] or \
        all(e["name"].startswith("neuron::graph.") for e in ops)
    assert {e["args"]["lane"] for e in lanes} >= {"Runtime", "TensorE", "DMA"}
    assert all("compiled graph" in e["name"] for e in lanes if e["args"]["lane"] != "Runtime")
    s = profiling.explorer_summary(prof)
    assert s.top_ops[0]["name"].startswith("neuron::graph.")
    assert s.engine_active_ns["TensorE"] > 0 and s.hbm_bytes > 0
    assert any("compiled graphs" in n for n in s.notes)
    # the graph's FLOPs count: two linears, 2*M*N*K each
    assert s.model_flops == pytest.approx(2 * 64 * 256 * 512 * 2)
    assert s.tensor_flops >= s.model_flops and 0 < s.mfu <= s.hfu < 1


def _partial_overlaps(trace):
    threads, bad = {}, 0
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            threads.setdefault((e["pid"], e["tid"]), []).append(e)
    for rows in threads.values():
        rows.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in rows:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]:
                bad += 1
            stack.append(e["ts"] + e["dur"])
    return bad


def test_neuron_profiler_trace_nests_cleanly_for_perfetto(tmp_path):
    x, w = _inputs()
    exporter = NeuronProfiler(NeuronConfig(profile_output_dir=str(tmp_path)))
    with profile(activities=ACT, on_trace_ready=exporter.export_trace):
        for _ in range(3):
            _step(x, w)
        torch.neuron.synchronize()
    trace = json.load(open(os.path.join(exporter.last_output_dir, "trace.json")))
    ops, lanes = _device(trace)
    assert ops and lanes and all("name" in e and "ts" in e and "pid" in e for e in ops + lanes)
    assert _partial_overlaps({"traceEvents": ops + lanes}) == 0


def test_profile_call_summarises_a_single_call():
    x, w = _inputs()
    out, s, _prof = profiling.profile_call(_step, x, w)
    assert out.device.type == "neuron"
    assert {o["name"] for o in s.top_ops} >= {"aten::mm", "aten::gelu", "aten::_softmax"}
    assert s.total_ns > 0 and 0 < s.engine_active_percent["TensorE"] <= 100


def test_cli_summary_from_a_plain_export(traced, tmp_path):
    from neuron_sim.explorer import summary_from_trace
    _prof, trace = traced
    s = summary_from_trace(trace)                     # no neuronExplorer section: events only
    assert s.top_ops[0]["name"] == "aten::mm"
    assert s.engine_active_percent["TensorE"] > 0 and s.engine_active_percent["DMA"] > 0
    assert any("trace events only" in n for n in s.notes)


def test_max_events_per_nc_caps_lanes_not_device_time(tmp_path):
    x, w = _inputs()
    cfg = NeuronConfig(profile_output_dir=str(tmp_path), max_events_per_nc=5)
    exporter = NeuronProfiler(cfg)
    with profile(activities=ACT, experimental_config=cfg, on_trace_ready=exporter.export_trace):
        _step(x, w)
        torch.neuron.synchronize()
    trace = json.load(open(os.path.join(exporter.last_output_dir, "trace.json")))
    ops, lanes = _device(trace)
    assert len(lanes) == 5 and {e["name"] for e in ops} >= {"aten::mm", "aten::gelu"}
    assert any("max_events_per_nc" in n for n in trace["neuronExplorer"]["summary"]["notes"])
