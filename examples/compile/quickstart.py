"""TorchNeuron's torch.compile quickstart, unchanged, plus what the simulator reports.

Run: .venv/bin/python examples/compile/quickstart.py
"""

import torch

import torch_neuronx
import torch_neuronx.neuron_dynamo_backend as ndb


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(10, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 2))

    def forward(self, x):
        return self.net(x).softmax(-1)


def timed(fn) -> int:
    torch.neuron.synchronize()
    start = torch_neuronx.device_time_ns()
    fn()
    torch.neuron.synchronize()
    return torch_neuronx.device_time_ns() - start


def main():
    model = M().to("neuron")
    cm = torch.compile(model, backend="neuron")
    with torch.inference_mode():
        x = torch.randn(2, 10, device="neuron")
        y = cm(x)                                           # compiles (once per input shape)
        assert y.device.type == "neuron"
        torch.testing.assert_close(y.cpu(), model(x).cpu())
        compiled_ns = timed(lambda: cm(x))                  # one launch of one program
        eager_ns = timed(lambda: model(x))                  # eager ops (fused by AEE)
    print(f"simulated: eager {eager_ns / 1e3:.1f} us, compiled {compiled_ns / 1e3:.1f} us")
    for g in ndb.get_dynamo_metrics():
        print(f"graph {g.graph_name}: {g.ops} ops as one program, {g.sim_run_ns / 1e3:.1f} us per "
              f"launch, simulated compile {g.sim_compile_ns / 1e9:.2f} s "
              f"({'cache hit' if g.cache_hit else 'cache miss'}), timed by {g.cost_source}")


if __name__ == "__main__":
    main()
