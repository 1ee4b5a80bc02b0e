# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/tutorials/tutorial-torch-distributed.html
# ("Tutorial: Train with DDP, FSDP2, and DTensor on Neuron", with its scripts distributed_train.py
# and training_common.py). Not a copy of the page's text: the stored copies are cut early, so this
# file follows what they show: the same training job run with DistributedDataParallel, FSDP2
# fully_shard and DTensor tensor parallelism (ColwiseParallel / RowwiseParallel via
# parallelize_module on a device mesh), model Linear(128, 256) - ReLU - Linear(256, 128), a global
# batch of 512 rows built from arange(...).remainder(257) / 128 - 1 + step / 10 with target
# batch.cos(), 10 steps at learning rate 0.01; DDP/FSDP ranks take equal slices of the batch, TP
# ranks the whole batch. Ours: SGD and a mean-squared-error loss (the excerpts stop before the
# optimizer and loss), 2 ranks under torchrun instead of the page's 64, and the reference (not
# from the page): one model trained on CPU on the whole batch, which every mode must match.
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel

BATCH, IN, HIDDEN, STEPS, LR = 512, 128, 256, 10, 0.01


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, IN))


def make_batch(step):
    x = torch.arange(BATCH * IN, dtype=torch.float32).reshape(BATCH, IN).remainder(257) / IN - 1 + step / 10
    return x, x.cos()


def run(model, device, rows):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = make_batch(step)
        loss = torch.nn.functional.mse_loss(model(x[rows].to(device)), y[rows].to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu() for k, v in model.state_dict().items()}


dist.init_process_group(backend="neuron")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("neuron", int(os.environ["LOCAL_RANK"]))
torch.neuron.set_device(device)
mesh = init_device_mesh("neuron", (world,))
shard = slice(rank * BATCH // world, (rank + 1) * BATCH // world)

reference = run(make_model(), "cpu", slice(None))
results = {
    "ddp": run(DistributedDataParallel(make_model().to(device)), device, shard),
    "fsdp": run(fully_shard(make_model().to(device), mesh=mesh), device, shard),
    "tp": run(parallelize_module(make_model().to(device), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()}),
              device, slice(None)),
}
for mode, state in results.items():
    for name, ref in reference.items():
        got = state.get(name, state.get("module." + name))        # DDP prefixes "module."
        assert got is not None, f"{mode}: no parameter {name} in {sorted(state)}"
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5, msg=lambda m: f"{mode} {name}: {m}")
    print(f"rank {rank}: {mode} parameters after {STEPS} steps match CPU", flush=True)
dist.destroy_process_group()
