"""`torch.neuron`: the device module, with TorchNeuron's functions (device, RNG, amp,
memory, streams) on top of the simulated runtime."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from . import _C
from .memory import (empty_cache, max_memory_allocated, max_memory_reserved,  # noqa: F401
                     mem_get_info, memory_allocated, memory_reserved, memory_stats,
                     memory_summary, reset_accumulated_memory_stats, reset_peak_memory_stats)
from .streams import (Event, Stream, _index, current_stream, default_stream, query,  # noqa: F401
                      record_event, set_stream, stream, synchronize, wait_event, wait_stream)


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _C._device_count()


def is_initialized() -> bool:
    return _C._is_initialized()


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


def _lazy_init() -> None:
    """PyTorch calls this once, at the first tensor placed on 'neuron' from Python."""
    _C._lazy_init()
    from . import _state
    model = _state.get("cost_model")
    if model is not None:
        model.warm_up_in_background()


init = _lazy_init


def current_device() -> int:
    return _C._current_device()


def set_device(device) -> None:
    index = _index(device)
    if not 0 <= index < device_count():
        raise ValueError(f"Invalid device id: {index}; this process sees {device_count()} neuron "
                         f"device(s) ({_C._instance_name()}).")
    _C._lazy_init()    # as torch.cuda.set_device: the runtime is initialised from here on
    _C._set_device(index)


@contextlib.contextmanager
def device(dev):
    """Makes `dev` the current neuron device inside the block."""
    previous = current_device()
    if dev is not None:
        set_device(dev)
    try:
        yield
    finally:
        _C._set_device(previous)


def get_device_name(device=None) -> str:
    return f"neuron:{_index(device)}"


@dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str            # the chip, e.g. "Trainium2"
    total_memory: int    # simulated HBM bytes of one logical NeuronCore
    chip: str            # short chip name, e.g. "trn2"
    instance: str        # the simulated EC2 instance type, e.g. "trn2.3xlarge"
    logical_nc_config: int
    neuroncore_version: str
    major: int           # (major, minor) as get_device_capability: the NeuronCore version
    minor: int
    multi_processor_count: int   # physical NeuronCores behind this logical core


def get_device_properties(device=None) -> NeuronDeviceProperties:
    from . import _visible
    index = _index(device)
    _C._check_device(index)
    v = _visible()
    chip = v.instance.chip
    return NeuronDeviceProperties(
        name=chip.product_name, total_memory=v.hbm_bytes_per_device,
        chip=chip.name, instance=v.instance.name, logical_nc_config=v.lnc,
        neuroncore_version=str(chip.neuroncore_version), major=int(chip.neuroncore_version),
        minor=0, multi_processor_count=v.lnc)


def get_device_capability(device=None) -> tuple[int, int]:
    """(major, minor) of the device's NeuronCore (3 on Trainium2), as torch.cuda's."""
    props = get_device_properties(device)
    return props.major, props.minor


# ---- random numbers: one default generator per device ---------------------------------------

class _DefaultGenerators:
    def __getitem__(self, index):
        return _C._get_default_generator(index)

    def __len__(self):
        return device_count()

    def __iter__(self):
        return iter([_C._get_default_generator(i) for i in range(device_count())])


default_generators = _DefaultGenerators()


def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of `device`, as torch.cuda._get_generator (torch.compile's
    graph-safe RNG functionalisation reads it)."""
    return default_generators[_index(device)]


def manual_seed(seed: int) -> None:
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for gen in default_generators:
        gen.manual_seed(int(seed))


def seed() -> None:
    default_generators[current_device()].seed()


def seed_all() -> None:
    random_seed = default_generators[current_device()].seed()
    for gen in default_generators:
        gen.manual_seed(random_seed)


def initial_seed() -> int:
    return default_generators[current_device()].initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return default_generators[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    default_generators[_index(device)].set_state(new_state)


def get_rng_state_all() -> list:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(states) -> None:
    for gen, state in zip(default_generators, states):
        gen.set_state(state)


# ---- autocast ---------------------------------------------------------------------------

def get_amp_supported_dtype() -> list:
    return [torch.float32, torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("neuron")


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("neuron")


# ---- compile metrics (torch_neuronx.neuron_dynamo_backend) ----------------------------------

def get_dynamo_metrics() -> dict:
    from .neuron_dynamo_backend import get_dynamo_metrics as metrics
    return metrics()
