"""Streams and events on 'neuron'. Events carry simulated timestamps: elapsed_time is the
simulated device time between them, in milliseconds."""

from __future__ import annotations

import contextlib

import torch

from . import _C

_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1


def _index(device) -> int:
    """The index of a neuron device given as None (the current one), an int, a string or a
    torch.device, for every torch.neuron function that takes a `device`."""
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "neuron":
        raise ValueError(f"Expected a neuron device, got {device}.")
    return device.index if device.index is not None else _C._current_device()


class Stream(torch.Stream):
    """A stream on a neuron device. Without NEURON_RT_ENABLE_HOST_CC=1 a new stream is the
    device's default stream, as in TorchNeuron."""

    def __new__(cls, device=None, priority=0, **kwargs):
        device = torch.device("neuron", _index(device))
        return super().__new__(cls, device=device, priority=priority, **kwargs)


class Event(torch.Event):
    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return super().__new__(cls, device="neuron", enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    return torch._C._accelerator_getStream(_index(device))


def default_stream(device=None) -> torch.Stream:
    return torch.Stream(stream_id=0, device_index=_index(device), device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    torch._C._accelerator_setStream(stream)


@contextlib.contextmanager
def stream(s):
    """Makes `s` the current stream of its device inside the block (None: no change)."""
    if s is None:
        yield None
        return
    previous = current_stream(s.device)
    set_stream(s)
    try:
        yield s
    finally:
        set_stream(previous)


def synchronize(device=None) -> None:
    """Waits for (that is, times) all queued work on the device."""
    torch._C._accelerator_synchronizeDevice(_index(device))


def wait_stream(s: torch.Stream) -> None:
    current_stream().wait_stream(s)


def wait_event(event: torch.Event) -> None:
    current_stream().wait_event(event)


def record_event(event: torch.Event | None = None) -> torch.Event:
    return current_stream().record_event(event)


def query() -> bool:
    return current_stream().query()
