"""DDP / FSDP2 / tensor-parallel training of a small GPT-style transformer, written the way the
AWS TorchNeuron distributed tutorial runs it: the same script on CPU/gloo and on neuron/neuron,
launched by torchrun, one process per NeuronCore.

    torchrun --nproc_per_node 2 examples/distributed/distributed_train.py --parallelism ddp --device cpu --backend gloo
    torchrun --nproc_per_node 2 examples/distributed/distributed_train.py --parallelism ddp --device neuron --backend neuron

On neuron-sim every rank owns one simulated logical NeuronCore (NEURON_SIM_INSTANCE, default
trn2.3xlarge: 4 cores; use trn2.48xlarge for up to 64). Rank 0 prints the loss of each step and,
on neuron, the simulated time of a step and of its collectives. --out writes the numbers as JSON
(the parity tests compare the two runs with it); --checkpoint saves a sharded checkpoint with
torch.distributed.checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# The attention itself is the demo GPT's (examples/gpt/gpt_model.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpt"))
from gpt_model import causal_attention  # noqa: E402


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.ln1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.ln1(x)
        # -1 heads: under tensor parallelism each rank holds heads / tp of them
        q, k, v = (p(h).view(b, t, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        x = x + self.o(causal_attention(q, k, v))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, layers=2, context=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def train_step(model, opt, x, y, timed: bool):
    """(loss, simulated ms of the step between two device events, or None when not `timed`)."""
    if timed:
        start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
        start.record()
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    if not timed:
        return loss, None
    end.record()
    end.synchronize()
    return loss, start.elapsed_time(end)


def tp_plan(layers: int):
    """Megatron-style: q, k, v and fc1 split by output columns, o and fc2 by input rows."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan = {}
    for i in range(layers):
        plan.update({f"blocks.{i}.{n}": ColwiseParallel() for n in ("q", "k", "v", "fc1")})
        plan.update({f"blocks.{i}.{n}": RowwiseParallel() for n in ("o", "fc2")})
    return plan


def full_state(model) -> dict:
    """Every parameter as a full CPU tensor (gathers DTensor shards)."""
    from torch.distributed.tensor import DTensor
    out = {}
    for name, p in model.state_dict().items():
        t = p.full_tensor() if isinstance(p, DTensor) else p
        out[name.replace("module.", "")] = t.detach().cpu()
    return out


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parallelism", choices=["ddp", "fsdp", "tp"], default="ddp")
    ap.add_argument("--device", choices=["cpu", "neuron"], default="neuron")
    ap.add_argument("--backend", choices=["gloo", "neuron"], default="neuron")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4, help="sequences per data-parallel rank")
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--out", help="rank 0 writes losses, parameters and timings here (JSON)")
    ap.add_argument("--checkpoint", help="save a sharded torch.distributed.checkpoint here")
    return ap


def train(args, group=None) -> dict:
    """One training run on an initialized process group; returns what rank 0 reports."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device(args.device, local_rank) if args.device == "neuron" else torch.device("cpu")

    torch.manual_seed(0)   # the same initial model on every rank and on both devices
    model = GPT(vocab=args.vocab, dim=args.dim, heads=args.heads, layers=args.layers,
                context=args.seq).to(device)

    if args.parallelism == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, process_group=group)
    else:
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
        mesh = (init_device_mesh(args.device, (world,)) if group is None
                else DeviceMesh.from_group(group, args.device))
        if args.parallelism == "fsdp":
            from torch.distributed.fsdp import fully_shard
            for block in model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
        else:
            from torch.distributed.tensor.parallel import parallelize_module
            parallelize_module(model, mesh, tp_plan(args.layers))

    # foreach=False: under TP some parameters are DTensors and some plain tensors, which the
    # multi-tensor kernels (the default on accelerators) refuse to mix; CUDA behaves the same.
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, foreach=False)
    # Data: the same generator on every device; DDP and FSDP split the batch by rank, TP ranks
    # all see the whole (replicated) batch.
    gen = torch.Generator().manual_seed(1)
    dp_rank, dp_world = (0, 1) if args.parallelism == "tp" else (rank, world)
    timed = args.device == "neuron"
    losses, step_ns, coll = [], [], []
    if timed:
        from torch_neuronx.distributed import clear_collective_log, collective_log
    for step in range(args.steps):
        data = torch.randint(0, args.vocab, (args.batch * dp_world, args.seq + 1), generator=gen)
        mine = data[dp_rank * args.batch:(dp_rank + 1) * args.batch]
        x, y = mine[:, :-1].to(device), mine[:, 1:].to(device)
        if timed:
            clear_collective_log()
        loss, ms = train_step(model, opt, x, y, timed)
        if timed:
            step_ns.append(int(ms * 1e6))
            coll = collective_log()
        reported = loss.detach().clone()
        dist.all_reduce(reported, group=group)   # the mean over ranks, for printing
        reported = reported.item() / world
        losses.append(reported)
        if rank == 0:
            line = f"step {step} loss {reported:.6f}"
            if timed:
                comm = sum(r.ns for r in coll)
                line += (f"  simulated step {step_ns[-1] / 1e3:.1f} us, {len(coll)} collectives "
                         f"{comm / 1e3:.1f} us")
            print(line, flush=True)

    params = full_state(model)
    if args.checkpoint:
        import torch.distributed.checkpoint as dcp
        dcp.save({"model": model.state_dict()}, checkpoint_id=args.checkpoint,
                 process_group=group)
    result = {"losses": losses, "world": world, "parallelism": args.parallelism,
              "device": args.device,
              "params": {k: v.double().flatten().tolist() for k, v in params.items()}}
    if timed:
        from torch_neuronx.distributed import rank_placement
        result.update(step_ns=step_ns, instance=rank_placement().instance,
                      collectives=[vars(r) | {"group": list(r.group)} for r in coll])
    return result


def main(argv=None):
    args = parser().parse_args(argv)
    dist.init_process_group(backend=args.backend, init_method="env://")
    result = train(args)
    if dist.get_rank() == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
