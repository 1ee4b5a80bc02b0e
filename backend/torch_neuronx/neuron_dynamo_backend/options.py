"""Settings and per-call options of torch.compile(backend="neuron").

Environment variables keep TorchNeuron's names and defaults (see the API reference, section 4);
they are declared once, in `torch_neuronx.settings` (part "torch.compile").
`torch.compile(..., options={...})` overrides them per call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..settings import get as setting

logger = logging.getLogger("torch_neuronx.neuron_dynamo_backend")

# Keys of `options` the backend reads; others are accepted and ignored with a warning, as
# TorchNeuron reads only a few keys.
KNOWN_OPTIONS = ("fallback_execution", "model_name")


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
