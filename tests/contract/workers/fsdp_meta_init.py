"""One rank of the FSDP2 meta-device init test, TorchTitan's way: set_device(LOCAL_RANK) before
init_process_group, the model built on meta, sharded, materialised with to_empty and
initialised (DTensor random ops), one step under torch.compile's fake tensors. One JSON line."""

import json
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

local = int(os.environ["LOCAL_RANK"])
torch.neuron.set_device(local)
dist.init_process_group(backend="neuron")
torch.manual_seed(0)
with torch.device("meta"):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
model.to_empty(device="neuron")
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        torch.nn.init.trunc_normal_(layer.weight, std=0.02)
        torch.nn.init.zeros_(layer.bias)
step = torch.compile(lambda x: model(x).square().mean(), backend="neuron")
loss = step(torch.ones(4, 16, device="neuron"))
loss.backward()
print(json.dumps({
    "rank": dist.get_rank(),
    "initialized": torch.neuron.is_initialized(),
    "param_devices": sorted({str(p.to_local().device) for p in model.parameters()}),
    "loss": loss.item(),
}))
dist.destroy_process_group()
