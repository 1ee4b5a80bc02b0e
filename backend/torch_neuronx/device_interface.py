"""Dynamo's device interface for 'neuron' (torch._dynamo.device_interface), as CUDA/XPU have:
Dynamo, Inductor and libraries reach streams, events, synchronisation and properties of a
device through it. Registered when torch._dynamo.device_interface is first imported, so
`import torch` does not pay for importing Dynamo."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch

_WORKER = ("set_device", "current_device", "get_device_properties")
_FUNCTIONS = _WORKER + ("device_count", "is_available", "stream", "current_stream", "set_stream",
                        "synchronize", "memory_allocated")


def _interface():
    from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

    from . import neuron

    class NeuronInterface(DeviceInterface):
        device = neuron.device
        Event = torch.Event
        Stream = torch.Stream

        class Worker:     # what a compile worker process calls
            pass

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            previous = neuron.current_device()
            if device >= 0 and device != previous:
                neuron.set_device(device)
            return previous

        exchange_device = maybe_exchange_device

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            neuron.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                           device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return neuron.current_stream(device_idx).stream_id

        get_compute_capability = staticmethod(neuron.get_device_capability)

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

        @staticmethod
        def is_triton_capable(device=None) -> bool:
            return False

    # the rest of the interface is torch.neuron's own functions
    for cls, names in ((NeuronInterface.Worker, _WORKER), (NeuronInterface, _FUNCTIONS)):
        for name in names:
            setattr(cls, name, staticmethod(getattr(neuron, name)))
    register_interface_for_device("neuron", NeuronInterface)
    for i in range(neuron.device_count()):
        register_interface_for_device(f"neuron:{i}", NeuronInterface)


def _graphsafe_rng():
    # torch.compile recomputes a checkpointed region's random ops (SDPA, dropout) with the
    # forward's values through graph-safe generator states; unregistered devices take a path
    # with CPU/CUDA/HPU/XPU only ("Backend not supported for neuron").
    from torch._functorch._aot_autograd import utils

    if hasattr(utils, "register_graphsafe_rng_device_type"):
        utils.register_graphsafe_rng_device_type("neuron")


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `then()` right after module `module` has loaded."""

    def __init__(self, module, then):
        self.module, self.then = module, then

    def find_spec(self, name, path, target=None):
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            self.then()

        loader.exec_module = exec_module
        return spec


def after_import(module: str, then) -> None:
    """`then()` now if `module` is loaded, else right after it loads (without importing it)."""
    if module in sys.modules:
        then()
    else:
        sys.meta_path.insert(0, _AfterImport(module, then))


def install() -> None:
    after_import("torch._dynamo.device_interface", _interface)
    after_import("torch._functorch._aot_autograd.utils", _graphsafe_rng)
