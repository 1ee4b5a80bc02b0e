"""torch.compile(backend="neuron") for neuron-sim, with TorchNeuron's helper API.

`backend="neuron"` resolves through the `torch_dynamo_backends` entry point; importing this
package also registers it. See README.md in this folder.
"""

from __future__ import annotations

from .backend import create_neuron_backend, get_model_name, neuron_backend, set_model_name
from .breaks import BreakReport, GraphBreak, explain_graph_breaks
from .errors import (CPUInputError, DynamicShapeError, NEFFCompilationError, NEFFExecutionError,
                     NeuronCompileError)
from .explain import StepProfile, compare, measure_step
from .metrics import (NeuronCompilationMetrics, cache_stats, get_dynamo_metrics, launch_stats,
                      reset_dynamo_metrics, reset_launch_stats)


def _register() -> None:
    # With the package installed, the entry point resolves "neuron" lazily (and loading it
    # imports this module: registering here too would be a duplicate). Without it, register.
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend
    if any(ep.name == "neuron" for ep in entry_points(group="torch_dynamo_backends")):
        return
    if "neuron" not in _COMPILER_FNS:
        register_backend(name="neuron")(neuron_backend)


_register()

__all__ = ["BreakReport", "CPUInputError", "DynamicShapeError", "GraphBreak",
           "NEFFCompilationError", "NEFFExecutionError", "NeuronCompilationMetrics",
           "NeuronCompileError", "cache_stats", "create_neuron_backend", "explain_graph_breaks",
           "get_dynamo_metrics", "get_model_name", "launch_stats", "measure_step", "compare",
           "StepProfile", "neuron_backend", "reset_dynamo_metrics", "reset_launch_stats",
           "set_model_name"]
