"""Settings and per-call options of torch.compile(backend="neuron").

Environment variables keep TorchNeuron's names and defaults (see the API reference, section 4);
they are declared once here, with the same `Setting` record as `torch_neuronx.settings`.
`torch.compile(..., options={...})` overrides them per call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..settings import Setting

logger = logging.getLogger("torch_neuronx.neuron_dynamo_backend")

SETTINGS = [
    Setting("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", bool, True,
            "A graph that fails to compile raises (True, the 2.33 default) instead of running "
            "eagerly; the `fallback_execution` option overrides it."),
    Setting("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", bool, False,
            "CPU tensors passed to a compiled function raise instead of being copied to neuron."),
    Setting("TORCH_NEURONX_RETAIN_DEVICE_MODE", bool, False,
            "Outputs of a compiled function go back to the device its CPU inputs came from."),
    Setting("TORCH_NEURONX_NEFF_DISABLE_CACHE", bool, False,
            "Do not read or write the persistent compile cache."),
]
_BY_NAME = {s.name: s for s in SETTINGS}

# Keys of `options` the backend reads; others are accepted and ignored with a warning, as
# TorchNeuron reads only a few keys.
KNOWN_OPTIONS = ("fallback_execution", "model_name")


def setting(name: str):
    return _BY_NAME[name].read()


@dataclass(frozen=True)
class CompileOptions:
    fallback_execution: bool     # run a graph eagerly when it cannot be compiled
    cpu_autocopy: bool           # copy CPU inputs to neuron
    retain_device: bool          # move outputs back to the inputs' original device
    model_name: str | None       # names graphs in metrics and the compile cache
    use_cache: bool

    @classmethod
    def resolve(cls, options: dict | None, mode: str | None) -> "CompileOptions":
        if mode not in (None, "default"):
            logger.warning("Neuron backend does not support mode='%s', falling back to default "
                           "mode.", mode)
        options = dict(options or {})
        unknown = sorted(set(options) - set(KNOWN_OPTIONS))
        if unknown:
            logger.warning("Neuron backend ignores torch.compile options %s; it reads only %s.",
                           unknown, list(KNOWN_OPTIONS))
        fallback = options.get("fallback_execution")
        if fallback is None:
            fallback = not setting("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION")
        return cls(fallback_execution=bool(fallback),
                   cpu_autocopy=not setting("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY"),
                   retain_device=setting("TORCH_NEURONX_RETAIN_DEVICE_MODE"),
                   model_name=options.get("model_name"),
                   use_cache=not setting("TORCH_NEURONX_NEFF_DISABLE_CACHE"))
