"""torch.profiler shows simulated device time per op, linked to the CPU ops."""

import json

import torch
from torch.profiler import ProfilerActivity, profile


def _profile(tmp_path):
    x = torch.randn(256, 256, device="neuron")
    torch.neuron.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(3):
            y = torch.relu(x @ x)
        torch.neuron.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return prof, json.loads(path.read_text())["traceEvents"]


def test_device_rows_with_simulated_durations(tmp_path):
    prof, events = _profile(tmp_path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    names = [e["name"] for e in kernels if e.get("tid") == 0]
    assert names.count("aten::mm") == 3 and names.count("aten::relu") == 3
    assert all(e["pid"] == 0 and e["args"]["device_type"] == "neuron" for e in kernels)
    # each device row is linked to the CPU op that launched it: the flow starts on a
    # launch row inside that op (same thread, within its span) and ends at the device row
    cpu = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    starts = {e["id"]: e for e in events if e.get("cat") == "ac2g" and e.get("ph") == "s"}
    ends = {e["id"]: e for e in events if e.get("cat") == "ac2g" and e.get("ph") == "f"}
    assert len(ends) == 6 and set(starts) == set(ends)
    for k in kernels:
        op, start = cpu[k["args"]["External id"]], starts[k["args"]["External id"]]
        assert op["name"] == k["name"] and (start["pid"], start["tid"]) == (op["pid"], op["tid"])
        assert op["ts"] <= start["ts"] <= op["ts"] + op["dur"]
        assert start["ts"] <= k["ts"] + 1e-3            # the device starts after the launch


def test_key_averages_has_device_time(tmp_path):
    prof, events = _profile(tmp_path)
    rows = {e.key: e for e in prof.key_averages()}
    mm_kernel = [e for e in events if e.get("cat") == "kernel" and e["name"] == "aten::mm"]
    assert rows["aten::mm"].device_time_total > 0
    assert abs(rows["aten::mm"].device_time_total - sum(e["dur"] for e in mm_kernel)) < 1e-3


def test_device_durations_match_event_timing(tmp_path):
    x = torch.randn(256, 256, device="neuron")
    torch.neuron.synchronize()
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        start.record()
        y = x @ x
        end.record()
        torch.neuron.synchronize()
    from torch.autograd import DeviceType
    device_us = sum(e.self_device_time_total for e in prof.key_averages()
                    if e.device_type == DeviceType.CPU)  # CPU ops carry their device rows' time
    # elapsed_time also holds the end event's own record (one 75 ns semaphore write).
    assert abs(device_us / 1e3 + 75e-6 - start.elapsed_time(end)) < 1e-6
