"""The simulated device time of one call, for the tests that time what they run: the conftest.py
of tests/compile, tests/estimate and tests/timeonly puts this folder on sys.path."""

import torch

import torch_neuronx


def device_ns(fn, warmup=False):
    """(simulated device time one call of `fn` adds, its result); with `warmup`, after one
    unmeasured call (compiles, caches, first-touch allocations)."""
    if warmup:
        fn()
    torch.neuron.synchronize()
    start = torch_neuronx.device_time_ns()
    out = fn()
    torch.neuron.synchronize()
    return torch_neuronx.device_time_ns() - start, out
