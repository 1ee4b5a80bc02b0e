"""The NeuronCore ISA: one module per instruction under <engine>/, named after the NKI ISA (what a
module holds: README.md). `module_for(name)` finds the module of an instruction name."""

from __future__ import annotations

import functools
import importlib
import inspect

_MODULES = {
    "nc_matmul": "tensor.nc_matmul", "load_stationary": "tensor.nc_matmul",
    "nc_matmul_mx": "tensor.nc_matmul_mx", "nc_transpose": "tensor.nc_transpose",
    "tensor_tensor": "vector.tensor_tensor", "tensor_scalar": "vector.tensor_scalar",
    "tensor_reduce": "vector.tensor_reduce", "tensor_copy": "vector.tensor_copy",
    "memset": "vector.memset", "bn_stats": "vector.bn_stats", "bn_aggr": "vector.bn_aggr",
    "select": "vector.select", "tensor_tensor_scan": "vector.tensor_tensor_scan",
    "reciprocal": "vector.reciprocal", "exponential": "vector.exponential",
    "quantize_mx": "vector.quantize_mx", "max8": "vector.max8", "dropout": "vector.dropout",
    "scalar_tensor_tensor": "vector.scalar_tensor_tensor",
    "tensor_scalar_reduce": "vector.tensor_scalar_reduce",
    "tensor_copy_predicated": "vector.tensor_copy_predicated",
    "activation": "scalar.activation", "activation_reduce": "scalar.activation",
    "iota": "gpsimd.iota", "affine_select": "gpsimd.affine_select",
    "local_gather": "gpsimd.local_gather",
    "tensor_partition_reduce": "gpsimd.tensor_partition_reduce",
    "dma_copy": "dma.dma_copy", "dma_transpose": "dma.dma_transpose",
    "core_barrier": "sync.core_barrier",
}


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
def build_params(mod) -> frozenset:
    """The keyword names a module's `build` takes after the chip."""
    return frozenset(list(inspect.signature(mod.build).parameters)[1:])
