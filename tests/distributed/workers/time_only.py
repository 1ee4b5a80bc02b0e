"""One rank of the time-only parity run: the example's GPT under FSDP2 on backend "neuron",
trained for a few steps in normal execution and again in time-only execution; each rank
prints its simulated step times (ns) of both as JSON."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import torch_neuronx

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "distributed"))
from distributed_train import GPT  # noqa: E402


def step_times(timed_only: bool, steps: int = 2) -> list[int]:
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("neuron", rank)
    torch.manual_seed(0)
    with torch_neuronx.time_only(timed_only):
        model = GPT(vocab=256, dim=64, heads=4, layers=2, context=32).to(device)
        mesh = init_device_mesh("neuron", (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = torch.randint(0, 256, (4, 33), generator=torch.Generator().manual_seed(rank))
        x, y = data[:, :-1].to(device), data[:, 1:].to(device)
        times = []
        for _ in range(steps):
            start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
            start.record()
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            opt.step()
            opt.zero_grad()
            end.record()
            end.synchronize()
            times.append(round(start.elapsed_time(end) * 1e6))
    return times


dist.init_process_group(backend="neuron")
print(json.dumps({"rank": dist.get_rank(), "normal": step_times(False),
                  "time_only": step_times(True)}))
dist.destroy_process_group()
