# Source: https://github.com/aws-neuron/torch-neuronx/blob/main/examples/compile/device_placement.py
# (linked from the QUICKSTART.md of the same folder: "CPU tensors are automatically transferred
# to Neuron under torch.compile. Results are on neuron."). Not a copy of the file: written for
# this test, it makes the same calls (a function compiled with backend="neuron", dynamic=False,
# called on two CPU tensors of 4 elements, then on two neuron tensors; the result is on neuron
# both times) and compares the values with CPU PyTorch (not in the example).
import torch


@torch.compile(backend="neuron", dynamic=False)
def product(a, b):
    return a * b


a_cpu, b_cpu = torch.randn(4), torch.randn(4)
r1 = product(a_cpu, b_cpu)                 # CPU inputs: moved to neuron by the backend
assert r1.device.type == "neuron"
print(f"Input device:  {a_cpu.device}")
print(f"Output device: {r1.device}")

a_n, b_n = torch.randn(4, device="neuron"), torch.randn(4, device="neuron")
r2 = product(a_n, b_n)
assert r2.device.type == "neuron"
print(f"Neuron input -> Neuron output: {r2.device}")

# ---- check (not from the example) ----
torch.testing.assert_close(r1.cpu(), a_cpu * b_cpu)
torch.testing.assert_close(r2.cpu(), a_n.cpu() * b_n.cpu())
print("values match CPU")
