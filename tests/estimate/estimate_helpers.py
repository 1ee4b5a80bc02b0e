"""Helpers shared by the estimate tests (a uniquely named module: several test folders have a
conftest.py, so `from conftest import ...` would be ambiguous)."""

import torch

import torch_neuronx


def device_ns(fn, warmup=False) -> int:
    """Simulated device time one call of `fn` adds; with `warmup`, after one unmeasured call
    (compiles, caches, first-touch allocations)."""
    if warmup:
        fn()
    torch.neuron.synchronize()
    start = torch_neuronx.device_time_ns()
    fn()
    torch.neuron.synchronize()
    return torch_neuronx.device_time_ns() - start
