"""TorchNeuron's profiler configuration: `ProfileMode` and `NeuronConfig`, accepted by
`torch.profiler.profile(experimental_config=NeuronConfig(...))` (torchneuron-api.md section 8).

`NeuronConfig` subclasses torch's `_ExperimentalConfig`, so torch.profiler takes it unchanged; its
fields are TorchNeuron's (`modes`, `max_events_per_nc`, `capture_enabled_for_nc`,
`profile_output_dir`, `neff_cache_dir`, `precache_node_info`). The simulator honours what it can
honestly provide for each mode; `NeuronProfiler` writes a `modes.json` that says what each mode
produced here (see profiler.py)."""

from __future__ import annotations

import enum
import os

from torch._C._profiler import _ExperimentalConfig

from .. import settings
from ..instance import parse_cores
from ..private_files import user_cache_dir


class ProfileMode(enum.Enum):
    DEVICE = "device"            # hardware: NEFF + NTFF instruction trace (HBM reserved)
    RUNTIME = "runtime"          # hardware: ntrace.pb + trace_info.pb (runtime API events)
    CPU_UTIL = "cpu_util"        # cpu_util.pb
    HOST_MEMORY = "host_memory"  # host_mem.pb


class NeuronConfig(_ExperimentalConfig):
    """Neuron profiling options, passed as `experimental_config=` to torch.profiler.profile."""

    def __init__(self, modes=None, max_events_per_nc: int | None = None,
                 capture_enabled_for_nc=None, profile_output_dir: str = "./output",
                 neff_cache_dir: str | None = None, precache_node_info: bool = True, **kwargs):
        super().__init__(**kwargs)
        if modes is None:
            modes = [ProfileMode.DEVICE, ProfileMode.RUNTIME]
        self.modes = [m if isinstance(m, ProfileMode) else ProfileMode(str(m).lower())
                      for m in (modes if isinstance(modes, (list, tuple, set)) else [modes])]
        if max_events_per_nc is not None and int(max_events_per_nc) <= 0:
            raise ValueError(f"max_events_per_nc={max_events_per_nc}: expected a positive count")
        self.max_events_per_nc = max_events_per_nc
        self.capture_enabled_for_nc = capture_enabled_for_nc
        self.cores = (None if capture_enabled_for_nc in (None, "") else   # None: every core
                      set(parse_cores(capture_enabled_for_nc, "capture_enabled_for_nc")))
        self.profile_output_dir = os.fspath(profile_output_dir)
        self.neff_cache_dir = (neff_cache_dir or settings.get("TORCH_NEURONX_NEFF_CACHE_DIR")
                               or user_cache_dir("torch_neuronx", "neff"))
        self.precache_node_info = bool(precache_node_info)

    def __repr__(self):
        return (f"NeuronConfig(modes={[m.name for m in self.modes]}, "
                f"max_events_per_nc={self.max_events_per_nc}, "
                f"capture_enabled_for_nc={self.capture_enabled_for_nc!r}, "
                f"profile_output_dir={self.profile_output_dir!r})")
