"""Helpers shared by the compile tests (a uniquely named module: several test folders have a
conftest.py, so `from conftest import ...` would be ambiguous)."""

import torch

import torch_neuronx


def device_ns(fn):
    """Simulated device time `fn()` adds, and its result."""
    torch.neuron.synchronize()
    start = torch_neuronx.device_time_ns()
    out = fn()
    torch.neuron.synchronize()
    return torch_neuronx.device_time_ns() - start, out
