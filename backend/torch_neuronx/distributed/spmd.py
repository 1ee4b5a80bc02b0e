"""One rank of an N-rank job, simulated in this process: backend="neuron_spmd".

    import torch.distributed as dist
    from torch_neuronx.distributed import spmd

    with spmd.simulate_rank(world_size=64, rank=0, instance="trn2.48xlarge"):
        mesh = init_device_mesh("neuron", (64,))        # FSDP2 / DTensor / DDP as usual
        model = fully_shard(model, mesh=mesh)
        ...                                             # every collective is timed, none moves data

`simulate_rank` starts a process group of `world_size` ranks of which only `rank` exists. Its
collectives are torch's FakeProcessGroup behind the same C++ `_NeuronBackend` and the same Python
hook as backend="neuron" (backend.py): the hook charges each collective's simulated time to the
stream (neuron_sim.collectives on the fabric of `nodes` instances: NeuronLink inside an instance,
EFA between them; rank r on global logical core r), and the fake group returns at once without
touching the data. Output buffers keep whatever they held: results are not the job's (the
simulated time is). With a compiled graph running (its ops are not charged one by one) the
collective is charged as part of the graph: no stand-alone launch floor.

Symmetric ranks give the job's step from one rank; pipeline stages and MoE imbalance are
simulated once per distinct role and composed by the caller (docs/distributed.md, "One rank of a
large job, from one process").
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import FakeProcessGroup

from neuron_sim.collectives import fabric_for
from neuron_sim.hardware import get_instance

from .. import _C
from . import backend as _backend
from .errors import DistributedSetupError
from .placement import Placement

BACKEND = "neuron_spmd"
_JOB = {"instance": None, "lnc": None, "nodes": 1, "device": 0}


class _FakeStore(dist.Store):
    """init_process_group needs a store; no other rank will ever read it."""


class SpmdCollectives(_backend.Collectives):
    """backend.Collectives without peers: no cross-rank check (there is nobody to compare with),
    cores from the simulated job instead of a torchrun placement."""

    def __init__(self, group_rank: int, group_size: int, global_ranks):
        super().__init__(None, group_rank, group_size, global_ranks,
                         fabric_for(_JOB["instance"], _JOB["lnc"], _JOB["nodes"]),
                         list(global_ranks), _JOB["device"], check=False)  # rank r on core r

    def _check_local(self, op, inputs, outputs):
        # torch's helpers place some tensors on device rank % device_count (DTensor's RNG
        # tracker broadcasts its seed from there): in one process that is another local device.
        # Any neuron device stands for this rank's; the time is charged to the rank's stream.
        index = next((t.device.index for t in (*inputs, *outputs) if t.device.type == "neuron"),
                     self.device)
        own, self.device = self.device, index
        try:
            super()._check_local(op, inputs, outputs)
        finally:
            self.device = own


def _create(opts, pg_options=None):
    if _JOB["instance"] is None:
        raise DistributedSetupError(
            "backend='neuron_spmd' simulates one rank of a job in this process; start it with "
            "torch_neuronx.distributed.spmd.simulate_rank(world_size, rank, instance), not "
            "init_process_group directly.")
    rank, size = opts.group_rank, opts.group_size
    global_ranks = list(opts.global_ranks_in_group) or list(range(size))
    host = FakeProcessGroup._create_internal(rank, size, FakeProcessGroup.Options())
    _C._init_distributed()
    return _C._NeuronBackend(host, SpmdCollectives(rank, size, global_ranks))


def job_cores(world_size: int, instance: str, lnc: int | None = None) -> tuple:
    """(nodes, fabric) for a job of `world_size` ranks, one per logical core, filling instances
    in order."""
    one = fabric_for(instance, lnc)
    nodes = -(-world_size // one.cores)
    return nodes, fabric_for(instance, lnc, nodes)


@contextmanager
def simulate_rank(world_size: int, rank: int = 0, instance: str | None = None,
                  lnc: int | None = None):
    """Run the body as rank `rank` of a `world_size`-rank job on `instance` (default: the
    simulated instance of this process; another instance must have the same chip, since compute
    is timed on this process's device), one rank per logical core over as many instances as
    needed. The default process group is destroyed on exit."""
    import torch_neuronx
    if dist.is_initialized():
        raise DistributedSetupError(
            "simulate_rank needs this process without a process group: one is already "
            f"initialized (backend {dist.get_backend()!r}). Call "
            "dist.destroy_process_group() first.")
    if not 0 <= rank < world_size:
        raise DistributedSetupError(f"rank {rank} is outside a job of world_size={world_size}; "
                                    f"give 0 <= rank < {world_size}.")
    device_instance = torch_neuronx.get_instance()
    instance = instance or device_instance
    chip, device_chip = get_instance(instance).chip.name, get_instance(device_instance).chip.name
    if chip != device_chip:
        raise DistributedSetupError(
            f"simulate_rank(instance={instance!r}): its chip is {chip} but this process times "
            f"compute on {device_chip} ({device_instance}). Choose an instance of {device_chip}, "
            f"or set_instance() to one of {chip} before the device is first used.")
    nodes, fabric = job_cores(world_size, instance, lnc)
    device = torch.neuron.current_device()
    _JOB.update(instance=instance, lnc=fabric.lnc, nodes=nodes, device=device)
    per_node = fabric.cores_per_node
    # what torch_neuronx.distributed.rank_placement() reports for this rank
    _backend._STATE["placement"] = Placement(
        rank=rank, world_size=world_size, local_rank=device, local_world_size=per_node,
        node=rank // per_node, core=rank % per_node, instance=instance, lnc=fabric.lnc,
        cores_per_node=per_node)
    _backend.register(BACKEND, _create)
    # DeviceMesh picks the device from LOCAL_RANK (else rank % device count): this process's
    local_rank = os.environ.get("LOCAL_RANK")
    os.environ["LOCAL_RANK"] = str(device)
    dist.init_process_group(BACKEND, store=_FakeStore(), rank=rank, world_size=world_size)
    try:
        yield fabric
    finally:
        dist.destroy_process_group()
        _JOB["instance"] = None
        _backend._STATE["placement"] = None
        if local_rank is None:
            os.environ.pop("LOCAL_RANK", None)
        else:
            os.environ["LOCAL_RANK"] = local_rank
