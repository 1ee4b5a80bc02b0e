"""torch_neuronx.profiling: TorchNeuron's profiling surface on the simulator (usage and what it
writes: README.md). `NeuronConfig(...)` goes to `torch.profiler.profile(experimental_config=)`,
`NeuronProfiler(cfg).export_trace` to its `on_trace_ready`. Device rows come from the Kineto
plugin (backend/csrc/profiler); per-engine lanes from hook.py; `explorer_summary(prof)` is the
Explorer-style summary (neuron_sim.explorer)."""

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
