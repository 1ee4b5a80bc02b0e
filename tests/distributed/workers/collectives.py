"""One rank of the collectives test: device semantics under torchrun, every collective with its
values, functional collectives, DeviceMesh/DTensor, p2p, the owned-device rule and profiler
rows. Prints `RESULT <json>` with what it saw."""

import json
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from torch_neuronx.distributed import collective_log

dist.init_process_group(backend="neuron")
rank, world = dist.get_rank(), dist.get_world_size()
seen = {"device_count": torch.neuron.device_count(), "current": torch.neuron.current_device(),
        "visible": os.environ.get("NEURON_RT_VISIBLE_CORES"), "backend": dist.get_backend()}
dev = torch.device("neuron")
ok = {}


def check(name, got, want):
    ok[name] = bool(torch.equal(got.cpu(), want)) if isinstance(want, torch.Tensor) else got == want


r = float(rank + 1)
t = torch.full((4,), r, device=dev)
dist.all_reduce(t)
check("all_reduce_sum", t, torch.full((4,), world * (world + 1) / 2))
t = torch.full((4,), r, device=dev)
dist.all_reduce(t, op=dist.ReduceOp.MAX)
check("all_reduce_max", t, torch.full((4,), float(world)))
t = torch.full((4,), r, device=dev)
dist.all_reduce(t, op=dist.ReduceOp.AVG)
check("all_reduce_avg", t, torch.full((4,), (world + 1) / 2))
t = torch.full((2,), r, device=dev, dtype=torch.bfloat16)
dist.all_reduce(t)
check("all_reduce_bf16", t, torch.full((2,), world * (world + 1) / 2, dtype=torch.bfloat16))

parts = [torch.empty(3, device=dev) for _ in range(world)]
dist.all_gather(parts, torch.full((3,), r, device=dev))
check("all_gather", torch.stack(parts), torch.arange(1, world + 1.).repeat_interleave(3).view(world, 3))
out = torch.empty(world * 3, device=dev)
dist.all_gather_into_tensor(out, torch.full((3,), r, device=dev))
check("all_gather_into_tensor", out, torch.arange(1, world + 1.).repeat_interleave(3))

out = torch.empty(2, device=dev)
dist.reduce_scatter(out, [torch.full((2,), float(i), device=dev) for i in range(world)])
check("reduce_scatter", out, torch.full((2,), float(rank * world)))
out = torch.empty(2, device=dev)
dist.reduce_scatter_tensor(out, torch.arange(world * 2., device=dev))
check("reduce_scatter_tensor", out, torch.arange(world * 2.)[rank * 2:rank * 2 + 2] * world)

outs = [torch.empty(1, device=dev) for _ in range(world)]
dist.all_to_all(outs, [torch.full((1,), float(rank * 10 + j), device=dev) for j in range(world)])
check("all_to_all", torch.cat(outs), torch.tensor([float(j * 10 + rank) for j in range(world)]))
out = torch.empty(world, device=dev)
dist.all_to_all_single(out, torch.tensor([float(rank * 10 + j) for j in range(world)], device=dev))
check("all_to_all_single", out, torch.tensor([float(j * 10 + rank) for j in range(world)]))

t = torch.full((3,), r, device=dev)
dist.broadcast(t, src=world - 1)
check("broadcast", t, torch.full((3,), float(world)))

gathered = [torch.empty(2, device=dev) for _ in range(world)] if rank == 0 else None
dist.gather(torch.full((2,), r, device=dev), gathered, dst=0)
check("gather", torch.cat(gathered) if rank == 0 else torch.zeros(0),
      torch.arange(1, world + 1.).repeat_interleave(2) if rank == 0 else torch.zeros(0))
got = torch.empty(2, device=dev)
dist.scatter(got, [torch.full((2,), float(i), device=dev) for i in range(world)] if rank == 0
             else None, src=0)
check("scatter", got, torch.full((2,), float(rank)))
seen["gather_scatter_ns"] = [rec.ns for rec in collective_log()[-2:]]

peer = (rank + 1) % world
src = (rank - 1) % world
buf = torch.empty(2, device=dev)
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((2,), r, device=dev), peer),
                               dist.P2POp(dist.irecv, buf, src)])
for q in reqs:
    q.wait()
check("send_recv", buf, torch.full((2,), float(src + 1)))
dist.barrier()

objs = [None] * world
dist.all_gather_object(objs, {"rank": rank})
check("all_gather_object", objs, [{"rank": i} for i in range(world)])

x = torch.full((4,), r, device=dev)
check("funcol_all_reduce", funcol.all_reduce(x, "sum", dist.group.WORLD),
      torch.full((4,), world * (world + 1) / 2))
check("funcol_all_gather", funcol.all_gather_tensor(x, 0, dist.group.WORLD),
      torch.arange(1, world + 1.).repeat_interleave(4))
check("funcol_reduce_scatter",
      funcol.reduce_scatter_tensor(torch.ones(world * 2, device=dev), "sum", 0, dist.group.WORLD),
      torch.full((2,), float(world)))

mesh = init_device_mesh("neuron", (world,))
full = torch.arange(world * 4., device=dev).view(world * 2, 2)
d = distribute_tensor(full, mesh, [Shard(0)])
check("dtensor_local_shard", d.to_local(), torch.arange(world * 4.).view(world * 2, 2)[rank * 2:rank * 2 + 2])
check("dtensor_full_tensor", d.full_tensor(), torch.arange(world * 4.).view(world * 2, 2))
check("dtensor_device", d.to_local().device.index, rank)

try:
    torch.empty(1, device=torch.device("neuron", (rank + 1) % world))
    seen["other_device_error"] = None
except RuntimeError as e:
    seen["other_device_error"] = str(e)

# simulated time: an Event pair around a 1 MiB all-reduce, and the profiler's device rows
from torch.profiler import ProfilerActivity, profile  # noqa: E402

big = torch.ones(256 * 1024, device=dev)
start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
start.record()
dist.all_reduce(big)
end.record()
end.synchronize()
seen["all_reduce_1MiB_us"] = start.elapsed_time(end) * 1e3
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    dist.all_reduce(big)
    torch.neuron.synchronize()
seen["profiler_names"] = sorted({e.name for e in prof.events() if e.name.startswith("neuron::")})
seen["last_record"] = {k: v for k, v in vars(collective_log()[-1]).items() if k != "group"}
seen["ok"] = ok
dist.destroy_process_group()
print("RESULT " + json.dumps(seen), flush=True)
