"""One verdict per run (issue 17): the Explorer summary of a plain torch.profiler trace and of a
NeuronProfiler trace of the same steps agree, or the plain one gives no verdict and says why."""

import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from neuron_sim.explorer import summary_from_trace
from neuron_sim.explorer.trace import NO_VERDICT
from torch_neuronx import profiling
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler

sys.path.insert(0, os.path.dirname(__file__))
from training import small_training_step  # noqa: E402

ACT = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def neuronprofiler_summary(step, out):
    """The summary NeuronProfiler writes into trace.json for one profiled step."""
    cfg = NeuronConfig(profile_output_dir=str(out))
    exporter = NeuronProfiler(cfg)
    with profile(activities=ACT, experimental_config=cfg, on_trace_ready=exporter.export_trace):
        step()
    return summary_from_trace(json.load(open(f"{exporter.last_output_dir}/trace.json")))


def test_plain_and_neuronprofiler_traces_of_the_same_steps_agree(tmp_path):
    step = small_training_step()
    full = neuronprofiler_summary(step, tmp_path / "np")

    with profile(activities=ACT) as prof:
        step()
    raw = tmp_path / "plain.json"
    prof.export_chrome_trace(str(raw))
    bare = summary_from_trace(json.load(open(raw)))        # rows only: no verdict, says why
    assert bare.verdict == NO_VERDICT and not bare.recommendations
    assert "unknown" in bare.text() and "none (no verdict)" in bare.text()

    profiling.prepare_trace(str(raw))                      # in the profiling process
    plain = summary_from_trace(json.load(open(raw)))
    assert plain.verdict == full.verdict and plain.verdict != NO_VERDICT
    assert plain.total_ns == full.total_ns
    assert plain.hfu == full.hfu and plain.hbm_bytes == full.hbm_bytes
    # (the inputs / intermediates split depends on which outputs the session saw before)
    assert [r["title"] for r in plain.recommendations] == \
        [r["title"] for r in full.recommendations]
    # the same device time by phase, and the same re-timed saving (issue 17's checked advice)
    assert plain.phases == full.phases and plain.phases["optimizer"]["ns"] > 0
    assert [r.get("saving_ns") for r in plain.recommendations] == \
        [r.get("saving_ns") for r in full.recommendations]
    assert "saving_ns" in plain.recommendations[0]


def test_summary_of_the_profile_object_agrees_without_exporting(tmp_path):
    """explorer_summary(prof) reads the phases and the re-timed advice from the profile's own
    events: the same summary as NeuronProfiler's trace of the same steps, and the profile can
    still be exported afterwards (torch writes a profile's trace once)."""
    step = small_training_step()
    full = neuronprofiler_summary(step, tmp_path / "np")

    with profile(activities=ACT) as prof:
        step()
    s = profiling.explorer_summary(prof)
    assert s.verdict == full.verdict and s.total_ns == full.total_ns
    assert s.phases == full.phases and s.phases["optimizer"]["ns"] > 0
    assert s.phases["optimizer_classes"] == ["AdamW"] and s.phases["other"]["ns"] == 0
    assert [(r["title"], r.get("saving_ns")) for r in s.recommendations] == \
        [(r["title"], r.get("saving_ns")) for r in full.recommendations]
    assert "saving_ns" in s.recommendations[0] and "device time by phase  forward" in s.text()
    prof.export_chrome_trace(str(tmp_path / "after.json"))
    assert json.load(open(tmp_path / "after.json"))["traceEvents"]
