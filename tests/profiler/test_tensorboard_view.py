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


def test_tensorboard_profiler_views(tmp_path):
    step = small_training_step()
    with profile(activities=ACT, schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path / "run"))) as prof:
        for _ in range(3):
            step()
            prof.step()
    path, = glob.glob(str(tmp_path / "run" / "*.pt.trace.json"))
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
