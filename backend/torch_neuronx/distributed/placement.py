"""Which logical NeuronCore each rank owns, TorchNeuron's way (reference §1, §6): under
init_process_group each process owns one core, NEURON_RT_VISIBLE_CORES is LOCAL_RANK unless the
user set it, device_count() == LOCAL_WORLD_SIZE and the current device is LOCAL_RANK."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import settings as neuron_settings
from ..instance import resolve
from .errors import DistributedSetupError


@dataclass(frozen=True)
class Placement:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: int            # GROUP_RANK under torchrun
    core: int            # runtime (VNC) id of the owned logical core on its instance
    instance: str
    lnc: int
    cores_per_node: int  # logical cores of one instance at this LNC

    @property
    def global_core(self) -> int:
        return self.node * self.cores_per_node + self.core


def _env_int(name, default):
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistributedSetupError(f"{name}={raw!r} is not an integer; torchrun sets it, or set "
                                    "it yourself when launching ranks another way.") from None


def from_environment(rank: int, world_size: int) -> Placement:
    """The placement of this process. LOCAL_RANK / LOCAL_WORLD_SIZE / GROUP_RANK come from
    torchrun; a job started another way (mp.spawn) defaults to one node: local == global."""
    local_rank = _env_int("LOCAL_RANK", rank)
    local_world = _env_int("LOCAL_WORLD_SIZE", world_size)
    node = _env_int("GROUP_RANK", 0)
    if not 0 <= local_rank < local_world:
        raise DistributedSetupError(
            f"rank {rank}: LOCAL_RANK={local_rank} is outside LOCAL_WORLD_SIZE={local_world}.")
    spec = neuron_settings.get("NEURON_RT_VISIBLE_CORES")
    try:
        if spec:   # the user chose: one core per process, or a list the local ranks index
            visible = resolve(None).cores
            core = visible[0] if len(visible) == 1 else (
                visible[local_rank] if local_rank < len(visible) else None)
            if core is None:
                raise DistributedSetupError(
                    f"rank {rank} (LOCAL_RANK {local_rank}): NEURON_RT_VISIBLE_CORES={spec!r} "
                    f"lists {len(visible)} cores but this node runs {local_world} ranks. Unset "
                    "it (each rank then takes core LOCAL_RANK) or list one core per local rank.")
        else:
            core = local_rank
        v = _owning(core)
    except ValueError as e:
        total = _total_cores()
        raise DistributedSetupError(
            f"rank {rank} (LOCAL_RANK {local_rank}) has no NeuronCore: {e} This node runs "
            f"{local_world} ranks per instance but the simulated "
            f"{neuron_settings.get('NEURON_SIM_INSTANCE')} has {total} logical cores. Launch at "
            f"most {total} processes per node (torchrun --nproc_per_node) or simulate a larger "
            "instance (NEURON_SIM_INSTANCE=trn2.48xlarge).") from None
    return Placement(rank=rank, world_size=world_size, local_rank=local_rank,
                     local_world_size=local_world, node=node, core=core,
                     instance=v.instance.name, lnc=v.lnc,
                     cores_per_node=v.instance.logical_cores(v.lnc))


def _owning(core: int):
    """The instance and cores this process sees when it owns runtime core `core` alone."""
    return resolve(None, {**os.environ, "NEURON_RT_VISIBLE_CORES": str(core),
                          "NEURON_RT_NUM_CORES": ""})


def _total_cores():
    try:
        v = resolve(None, {k: val for k, val in os.environ.items()
                           if k not in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES")})
        return v.device_count
    except ValueError:
        return "?"


def apply(p: Placement) -> None:
    """Configure this process's runtime for `p`: LOCAL_WORLD_SIZE devices, LOCAL_RANK owned and
    current. Must run before the device is first used."""
    import torch

    import torch_neuronx
    from .. import _C

    os.environ.setdefault("NEURON_RT_VISIBLE_CORES", str(p.core))
    visible = _owning(p.core)
    _C._configure(p.local_world_size, visible.hbm_bytes_per_device, visible.instance.name,
                  neuron_settings.get("NEURON_RT_ENABLE_HOST_CC"), owned_device=p.local_rank,
                  owner=f"rank {p.rank}, LOCAL_RANK {p.local_rank}, NeuronCore {p.core}")
    torch_neuronx._use(visible)
    torch.neuron.set_device(p.local_rank)
