# Source: https://github.com/aws-neuron/torch-neuronx/blob/main/examples/compile/nki_integration.py
# (linked from the QUICKSTART.md of the same folder: "Write kernels using NKI and integrate with
# torch.compile"). Not a copy of the file: written for this test, it makes the same calls (a
# legacy `neuronxcc.nki` kernel adding two 128 x 512 tiles, decorated @wrap_nki @nki.jit, made
# a custom op with torch_neuronx.nki_op("example::nki_add", mutates_args={}), called between
# torch ops inside torch.compile(backend="neuron", fullgraph=True)) and checks the result against
# a * 2 + b computed by PyTorch, as the example does.
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch

from torch_neuronx import nki_op, wrap_nki


@wrap_nki
@nki.jit
def tile_add(x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows = nl.arange(128)[:, None]
    cols = nl.arange(512)[None, :]
    nl.store(out[rows, cols], value=nl.load(x[rows, cols]) + nl.load(y[rows, cols]))
    return out


@nki_op("example::nki_add", mutates_args={})
def nki_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return tile_add(x, y)


@torch.compile(backend="neuron", fullgraph=True)
def double_then_add(a, b):
    return nki_add(a * 2, b)


a = torch.rand(128, 512, device="neuron")
b = torch.rand(128, 512, device="neuron")
result = double_then_add(a, b)
torch.testing.assert_close(result, a * 2 + b, rtol=1e-4, atol=1e-4)
torch.testing.assert_close(result.cpu(), a.cpu() * 2 + b.cpu(), rtol=1e-4, atol=1e-4)
print(f"NKI op inside torch.compile matches a * 2 + b: shape {tuple(result.shape)}, device {result.device}")
