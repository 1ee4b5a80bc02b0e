"""One rank of the PREMUL_SUM test: all_reduce / reduce_scatter with NCCL's pre-multiplied sum
(float and tensor factors) and FSDP2 with a gradient divide factor. One JSON line."""

import json

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch_neuronx.distributed import clear_collective_log, collective_log

dist.init_process_group(backend="neuron")
rank, dev = dist.get_rank(), torch.device("neuron", dist.get_rank())
out = {}

x = torch.arange(1.0, 5.0, device=dev) * (rank + 1)
dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
out["all_reduce"] = x.cpu().tolist()

y = torch.arange(1.0, 5.0, device=dev) * (rank + 1)
dist.all_reduce(y, op=dist._make_nccl_premul_sum(torch.tensor(0.25, device=dev)))
out["all_reduce_tensor_factor"] = y.cpu().tolist()

src = torch.arange(1.0, 5.0, device=dev) * (rank + 1)
dst = torch.empty(2, device=dev)
dist.reduce_scatter_tensor(dst, src, op=dist._make_nccl_premul_sum(2.0))
out["reduce_scatter"] = dst.cpu().tolist()
out["reduce_scatter_input_kept"] = src.cpu().tolist()

clear_collective_log()
a, b = torch.ones(1 << 16, device=dev), torch.ones(1 << 16, device=dev)
dist.all_reduce(a, op=dist.ReduceOp.SUM)
dist.all_reduce(b, op=dist._make_nccl_premul_sum(0.5))
out["ns"] = [r.ns for r in collective_log()]


def grads(divide_factor):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)).to(dev)
    fully_shard(model)
    if divide_factor is not None:
        model.set_gradient_divide_factor(divide_factor)
    inp = torch.arange(24.0, device=dev).reshape(3, 8) * (rank + 1) / 24
    model(inp).square().sum().backward()
    return [p.grad.to_local().cpu() for p in model.parameters()]


avg, by4 = grads(None), grads(4.0)          # AVG divides by 2, the factor by 4
out["fsdp_ratio_ok"] = all(torch.allclose(g4 * 2, ga, rtol=1e-6, atol=1e-7)
                           for g4, ga in zip(by4, avg))
print(json.dumps(out))
dist.destroy_process_group()
