"""One rank of the DTensor RNG test: random DTensors through DTensor's offset-based tracker,
which reads and writes torch.neuron's 16-byte (seed, offset) state. Prints one JSON line."""

import json

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor import rand as dtensor_rand

dist.init_process_group(backend="neuron")
mesh = init_device_mesh("neuron", (dist.get_world_size(),))
torch.manual_seed(1234)
before = torch.neuron.get_rng_state()
sharded = dtensor_rand((8, 6), device_mesh=mesh, placements=[Shard(0)])
after = torch.neuron.get_rng_state()
replicated = dtensor_rand((4, 3), device_mesh=mesh, placements=[Replicate()])
full = sharded.full_tensor().cpu()
torch.nn.init.uniform_(sharded)        # an init of a sharded parameter, as FSDP2 models do
print(json.dumps({
    "rank": dist.get_rank(),
    "state_bytes": before.numel(),
    "seed": int(before[:8].view(torch.int64)),
    "offset_before": int(before[8:].view(torch.int64)),
    "offset_after": int(after[8:].view(torch.int64)),
    "local": sharded.to_local().cpu().tolist(),
    "full": full.tolist(),
    "replicated": replicated.to_local().cpu().tolist(),
}))
dist.destroy_process_group()
