"""The NeuronCore ISA: one module per instruction under <engine>/, named after the NKI ISA (what a
module holds: README.md). `module_for(name)` finds the module of an instruction name."""

from __future__ import annotations

import functools
import importlib
import inspect

# the instruction modules by engine folder, each named after its instruction
_BY_ENGINE = {
    "tensor": ("nc_matmul", "nc_matmul_mx", "nc_transpose"),
    "vector": ("tensor_tensor", "tensor_scalar", "tensor_reduce", "tensor_copy", "memset",
               "bn_stats", "bn_aggr", "select", "tensor_tensor_scan", "reciprocal", "exponential",
               "quantize_mx", "max8", "dropout", "scalar_tensor_tensor", "tensor_scalar_reduce",
               "tensor_copy_predicated"),
    "scalar": ("activation",),
    "gpsimd": ("iota", "affine_select", "local_gather", "tensor_partition_reduce"),
    "dma": ("dma_copy", "dma_transpose", "sendrecv"),
    "sync": ("core_barrier",),
}
# instruction name -> module, the second instruction of a module included
_MODULES = {name: f"{engine}.{name}" for engine, names in _BY_ENGINE.items() for name in names} | {
    "load_stationary": "tensor.nc_matmul", "activation_reduce": "scalar.activation"}


@functools.cache
def module_for(name: str):
    """The module of instruction `name` (None if the registry has no such instruction)."""
    if name not in _MODULES:
        return None
    return importlib.import_module(f"{__name__}.{_MODULES[name]}")


def instruction_names() -> list[str]:
    return sorted(_MODULES)


@functools.cache
def pure_instructions() -> frozenset:
    """The instructions whose module declares `PURE = True`: no state besides their operands (no
    engine accumulator, no random draw, no DMA), so a compiler may hoist them out of a loop."""
    return frozenset(m.NAME for m in map(module_for, _MODULES) if getattr(m, "PURE", False))


@functools.cache
def meeting_instructions() -> frozenset:
    """The instructions whose module declares `MEETS = True`: each runs as two rows, a signal to
    the other core of an LNC=2 pair and then a row that waits for the other core's signal; the
    k-th such instruction of one core meets the k-th of the other (timing.simulate_cores)."""
    return frozenset(m.NAME for m in map(module_for, _MODULES) if getattr(m, "MEETS", False))


@functools.cache
def build_params(mod) -> frozenset:
    """The keyword names a module's `build` takes after the chip."""
    return frozenset(list(inspect.signature(mod.build).parameters)[1:])
