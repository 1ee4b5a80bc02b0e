# Source: https://github.com/aws-neuron/torch-neuronx/blob/main/examples/compile/dtype_handling.py
# (linked from the QUICKSTART.md of the same folder; its "Known Issues" say float64 and int64 are
# cast to 32-bit types inside the graph and back on output). Not a copy of the file: written for
# this test, it makes the same calls (x + y compiled with backend="neuron", dynamic=False, on
# int64, float64 and float32 neuron tensors; each output keeps its input dtype) and compares the
# values with CPU PyTorch (not in the example).
import torch


@torch.compile(backend="neuron", dynamic=False)
def add(x, y):
    return x + y


cases = [
    (torch.tensor([1, 2, 3], dtype=torch.int64), torch.tensor([4, 5, 6], dtype=torch.int64)),
    (torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([0.5, 0.5], dtype=torch.float64)),
    (torch.randn(4, dtype=torch.float32), torch.randn(4, dtype=torch.float32)),
]
for x, y in cases:
    r = add(x.to("neuron"), y.to("neuron"))
    assert r.dtype == x.dtype, (r.dtype, x.dtype)
    print(f"{x.dtype} + {y.dtype} = {r.dtype}")
    # ---- check (not from the example) ----
    torch.testing.assert_close(r.cpu(), x + y)
print("values match CPU")
