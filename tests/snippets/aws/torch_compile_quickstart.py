# Source: https://github.com/aws-neuron/torch-neuronx/blob/main/examples/compile/QUICKSTART.md
# ("Quick Start"; the AWS page https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/torchneuron-resources.html
# names it the torch.compile quickstart). Not a copy of the page's text: written for this test, it
# makes the same calls on the same shapes (a Linear(10, 5) module moved to "neuron", compiled with
# backend="neuron", called under inference_mode on a (2, 10) neuron tensor, the page's two asserts
# and shape prints), then compares the result with CPU PyTorch (not on the page).
import torch
import torch.nn as nn


class TinyLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 5)

    def forward(self, x):
        return self.linear(x)


net = TinyLinear().to("neuron")
compiled = torch.compile(net, backend="neuron")

with torch.inference_mode():
    inp = torch.randn(2, 10, device="neuron")
    out = compiled(inp)

assert out.device.type == "neuron"
assert out.shape == (2, 5)
print(f"Input shape:  {inp.shape}")
print(f"Output shape: {out.shape}")

# ---- check (not from the page) ----
with torch.inference_mode():
    ref = net.cpu()(inp.cpu())
torch.testing.assert_close(out.cpu(), ref)
print("compiled output matches CPU")
