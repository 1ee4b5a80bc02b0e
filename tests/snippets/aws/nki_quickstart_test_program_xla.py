# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/get-started/quickstart-implement-run-kernel.html
# (step 8, PyTorch tab: test_program.py). Verbatim. It needs torch_xla (PyTorch/XLA), which
# TorchNeuron replaces with the 'neuron' device: the snippet test skips it (see the reason there).
import torch
from torch_xla.core import xla_model as xm
from add_kernel import nki_tensor_add_kernel

# Setup the XLA device and generate input tensors.
device = xm.xla_device()

a = torch.ones((4, 3), dtype=torch.float16).to(device=device)
b = torch.ones((4, 3), dtype=torch.float16).to(device=device)

# Invoke the kernel to add the results.
c = nki_tensor_add_kernel(a, b)

# Print creates an implicit XLA barrier/mark-step (triggers XLA compilation)
print(c)
