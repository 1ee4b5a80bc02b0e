"""One rank of a 2-D DeviceMesh ("dp", "tp") job on 4 ranks: collectives on each dimension's
subgroup reach the right ranks and are timed on the right cores. Prints `RESULT <json>`."""

import json

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from torch_neuronx.distributed import collective_log

dist.init_process_group("neuron")
rank = dist.get_rank()
mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
tp = torch.full((2,), float(rank), device="neuron")
dist.all_reduce(tp, group=mesh["tp"].get_group())
dp = torch.full((2,), float(rank), device="neuron")
dist.all_reduce(dp, group=mesh["dp"].get_group())
print("RESULT " + json.dumps({"tp": tp.cpu().tolist(), "dp": dp.cpu().tolist(),
                              "groups": [list(r.group) for r in collective_log()]}), flush=True)
dist.destroy_process_group()
