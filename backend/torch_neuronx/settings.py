"""Every environment variable neuron-sim reads, declared once with type, default and help.

Names are TorchNeuron's and the Neuron runtime's where they exist, so scripts written for
real Trainium keep their meaning; `NEURON_SIM_*` are the simulator's own. The README's
settings table is generated from this list (`python -m torch_neuronx.settings`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type
    default: object
    help: str

    def read(self, environ=None):
        raw = (os.environ if environ is None else environ).get(self.name)
        if raw is None or raw == "":
            return self.default
        if self.kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"{self.name}={raw!r} is not a boolean; use 0/1/true/false.")
        if self.kind is int:
            try:
                return int(raw)
            except ValueError:
                raise ValueError(f"{self.name}={raw!r} is not an integer.") from None
        return raw


SETTINGS = [
    Setting("NEURON_SIM_INSTANCE", str, "trn2.3xlarge",
            "Simulated instance (trn2.3xlarge, trn2.48xlarge, trn3.48xlarge, trn1.32xlarge, ...)."),
    Setting("NEURON_LOGICAL_NC_CONFIG", int, None,
            "Logical NeuronCore size, 1 or 2 (default: the chip's, 2 on Trn2)."),
    Setting("NEURON_RT_VISIBLE_CORES", str, None,
            "Logical cores this process sees: one index or a range such as 0-3."),
    Setting("NEURON_RT_NUM_CORES", int, 0, "Number of logical cores to use; 0 means all."),
    Setting("NEURON_RT_ENABLE_HOST_CC", bool, False,
            "New streams are real streams (otherwise they alias the default stream)."),
    Setting("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", bool, False,
            "Ops that fail on Neuron raise instead of running on CPU."),
    Setting("TORCH_NEURONX_ENABLE_CONCATENATION", bool, True,
            "Adaptive Eager Execution: fuse queued eager ops between sync points."),
    Setting("NEURON_LAUNCH_BLOCKING", bool, False,
            "Time every op as soon as it is issued (synchronous execution, for debugging)."),
    Setting("TORCH_NEURONX_NEFF_CACHE_DIR", str, "/tmp/neff_cache",
            "Directory of the compiled-program cache."),
    Setting("TORCH_NEURONX_LOG_LEVEL", str, "WARNING", "Log level of the torch_neuronx logger."),
    Setting("TORCH_NEURONX_DEBUG_DIR", str, None, "Where debug artifacts are written."),
    Setting("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", bool, False,
            "Keep intermediate compilation artifacts."),
    Setting("NEURON_CC_FLAGS", str, "", "Compiler flags (accepted; recorded in the compile cache key)."),
]

_BY_NAME = {s.name: s for s in SETTINGS}


def get(name: str, environ=None):
    return _BY_NAME[name].read(environ)


def _declarations():
    """Every settings list of the project, by the part that reads it. Each part declares its
    own (neuron_sim cannot import torch_neuronx); this is the one place that lists them all."""
    from neuron_sim import config as sim_config
    from neuron_sim.nki import settings as nki_settings

    from .distributed import settings as distributed_settings
    from .neuron_dynamo_backend import options as compile_options
    from .profiling import hook as profiling_hook
    return [
        ("device", SETTINGS),
        ("torch.compile", compile_options.SETTINGS),
        ("profiling", profiling_hook.LANE_SETTINGS),
        ("distributed", distributed_settings.SETTINGS),
        ("NKI", list(nki_settings.SETTINGS.values())),
        ("simulator", list(sim_config.SETTINGS.values())),
    ]


def markdown_table() -> str:
    rows = ["| variable | read by | type | default | meaning |", "|---|---|---|---|---|"]
    for part, declared in _declarations():
        for s in declared:
            kind = getattr(s, "kind", None) or getattr(s, "type")
            rows.append(f"| `{s.name}` | {part} | {kind.__name__} | {s.default!r} | {s.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
