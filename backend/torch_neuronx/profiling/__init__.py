"""torch_neuronx.profiling: TorchNeuron's profiling surface on the simulator.

    from torch.profiler import profile, ProfilerActivity
    from torch_neuronx.profiling import NeuronConfig, ProfileMode, NeuronProfiler

    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="out")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 experimental_config=cfg, on_trace_ready=NeuronProfiler(cfg).export_trace) as p:
        step(); torch.neuron.synchronize()

Device rows come from the Kineto plugin (backend/csrc/profiler); per-engine lanes from hook.py;
`explorer_summary(prof)` is the Explorer-style summary (neuron_sim.explorer)."""

import os

from .config import NeuronConfig, ProfileMode
from .hook import LANE_SETTINGS, OPTIONS as lane_options, session_programs
from .profiler import (NeuronProfiler, add_analysis_fields, drop_lane_events, explorer_summary,
                       prepare_trace, profile_call)

# Holistic Trace Analysis rounds float timestamps to whole microseconds (start up, end down, a
# workaround for overlapping nanosecond rows): a 0.4 us kernel becomes -1 us. Our traces trim
# overlaps (profiler._trim_overlaps), so keep HTA exact unless the user chose otherwise.
os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")


__all__ = ["NeuronConfig", "ProfileMode", "NeuronProfiler", "explorer_summary", "profile_call",
           "lane_options", "LANE_SETTINGS", "add_analysis_fields", "prepare_trace",
           "session_programs", "drop_lane_events"]
