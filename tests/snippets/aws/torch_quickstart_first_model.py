# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/get-started/quickstart-build-first-model.html
# ("Quickstart: Build your first model with torch-neuronx": "the three ways TorchNeuron executes
# a model — eager mode, torch.compile with the neuron backend, and mixed mode", "the same model
# all three ways", "forward passes only"). Not a copy of the page's text: the stored copy of the
# page is cut before its scripts, so this file follows that description with a small model
# written for this test: the same model run eager on "neuron", compiled with
# torch.compile(model, backend="neuron"), and mixed (eager, with one submodule compiled by
# Module.compile(backend="neuron")), each forward pass compared with CPU PyTorch.
import torch
import torch.nn as nn


class SmallClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(32, 64)
        self.block = nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        h = self.embed(x)
        h = h + self.block(h)
        return self.head(h).softmax(-1)


torch.manual_seed(0)
model = SmallClassifier().eval()
x = torch.randn(8, 32)
with torch.no_grad():
    expected = model(x)

model = model.to("neuron")
inp = x.to("neuron")
results = {}
with torch.no_grad():
    results["eager"] = model(inp)
    results["torch.compile"] = torch.compile(model, backend="neuron")(inp)
    model.block.compile(backend="neuron")          # mixed: only this submodule is compiled
    results["mixed"] = model(inp)

for mode, out in results.items():
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), expected)
    print(f"{mode:>13}: output {tuple(out.shape)} on {out.device}, matches CPU")
