# Source: https://github.com/aws-neuron/torch-neuronx/blob/main/examples/compile/distributed.py
# (linked from the QUICKSTART.md of the same folder: "Multi-process execution with torchrun").
# Not a copy of the file: written for this test, it makes the same calls (init_process_group
# ("neuron"), torch.neuron.set_device(rank), a Linear(64, 64) followed by the functional
# all_reduce(x, "sum", ranks) compiled with backend="neuron", a (4, 64) input under
# inference_mode) and prints each rank's result checksum against CPU PyTorch (not in the example).
import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import all_reduce   # what torch.compile needs


class LinearAllReduce(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        return all_reduce(self.linear(x), "sum", list(range(dist.get_world_size())))


dist.init_process_group("neuron")
rank, world = dist.get_rank(), dist.get_world_size()
torch.neuron.set_device(rank)
device = f"neuron:{rank}"

torch.manual_seed(0)                               # the same weights on every rank
net = LinearAllReduce().to(device)
compiled = torch.compile(net, backend="neuron")
torch.manual_seed(1 + rank)                        # a different input per rank
with torch.inference_mode():
    x = torch.randn(4, 64).to(device)
    y = compiled(x)

# ---- check (not from the example): the sum over ranks of linear(x_r), computed on CPU ----
w, b = net.linear.weight.detach().cpu(), net.linear.bias.detach().cpu()
expected = sum(torch.nn.functional.linear(torch.randn(4, 64, generator=torch.Generator().manual_seed(1 + r)), w, b)
               for r in range(world))
torch.testing.assert_close(y.cpu(), expected, rtol=1e-4, atol=1e-4)
print(f"[Rank {rank}] Output shape: {tuple(y.shape)} on {y.device}, matches CPU", flush=True)
dist.destroy_process_group()
