"""One rank of a 4-rank job on a 2-D DeviceMesh ("dp", "tp") made by init_device_mesh alone (no
init_process_group first): collectives on each dimension's subgroup, the tutorial's FSDP2 + TP
composition with bf16 mixed precision, and a rank that arrives late in simulated time. Prints
`RESULT <json>`."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import parallelize_module

import torch_neuronx
from torch_neuronx.distributed import collective_log

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "distributed"))
import distributed_train as example  # noqa: E402

mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
rank = dist.get_rank()
seen = {}
tp = torch.full((2,), float(rank), device="neuron")
dist.all_reduce(tp, group=mesh["tp"].get_group())
dp = torch.full((2,), float(rank), device="neuron")
dist.all_reduce(dp, group=mesh["dp"].get_group())
seen.update(tp=tp.cpu().tolist(), dp=dp.cpu().tolist(),
            groups=[list(r.group) for r in collective_log()])

torch.manual_seed(0)
model = example.GPT().to("neuron")
parallelize_module(model, mesh["tp"], example.tp_plan(len(model.blocks)))
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for block in model.blocks:
    fully_shard(block, mesh=mesh["dp"], mp_policy=policy)
fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
opt = torch.optim.SGD(model.parameters(), lr=1e-2, foreach=False)
data = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))
mine = data[mesh["dp"].get_local_rank() * 2:][:2]
losses = []
for _ in range(2):
    loss = F.cross_entropy(model(mine[:, :-1].to("neuron")).flatten(0, 1).float(),
                           mine[:, 1:].flatten().to("neuron"))
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item())
seen["losses"] = losses

# rank 1 computes longer before a collective: the others wait for it in simulated time
a = torch.randn(256, 256, device="neuron")
if rank == 1:
    for _ in range(10):
        a = a @ a / 256
torch.neuron.synchronize()
dist.all_reduce(torch.ones(4, device="neuron"))
torch.neuron.synchronize()
seen["wait_ns"] = collective_log()[-1].wait_ns
seen["clock_ns"] = torch_neuronx.device_time_ns()
print("RESULT " + json.dumps(seen), flush=True)
dist.destroy_process_group()
