"""The demo GPT (examples/gpt/gpt_model.py, as `make demo` trains it) with torch.compile(backend=
"neuron"): forward/backward graphs plus a compiled AdamW step, against the same eager step.

Run: .venv/bin/python examples/compile/train_gpt.py [--steps 4]
"""

import argparse
import os
import sys
import time

import torch

import torch_neuronx.neuron_dynamo_backend as ndb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpt"))
from gpt_model import GPT, GPTConfig, make_batch  # noqa: E402


def trainer(model, x, y, compiled):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    step = torch.compile(opt.step, backend="neuron") if compiled else opt.step
    losses = []

    def one_step():
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        step()
        losses.append(loss.item())
    return one_step, losses


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    cfg = GPTConfig()
    x, y = (t.to("neuron") for t in make_batch(cfg, args.batch))
    torch.manual_seed(0)
    eager_model = GPT(cfg).to("neuron")
    torch.manual_seed(0)
    compiled_model = GPT(cfg).to("neuron")
    ndb.set_model_name("GPT")
    eager_step, eager_losses = trainer(eager_model, x, y, compiled=False)
    compiled_step, compiled_losses = trainer(torch.compile(compiled_model, backend="neuron"),
                                             x, y, compiled=True)
    wall = time.perf_counter()
    compiled_step()                                   # compiles forward, backward, AdamW
    print(f"first compiled step (compiles): {time.perf_counter() - wall:.1f} s wall")
    eager_step()
    for _ in range(args.steps - 2):
        eager_step()
        compiled_step()
    eager = ndb.measure_step(eager_step)
    compiled = ndb.measure_step(compiled_step)
    for i, (a, b) in enumerate(zip(eager_losses, compiled_losses)):
        print(f"step {i}: loss eager {a:.5f} compiled {b:.5f}")
    print(ndb.compare(eager, compiled))
    print(f"simulated step: eager {eager.device_ns / 1e6:.3f} ms, compiled "
          f"{compiled.device_ns / 1e6:.3f} ms ({eager.device_ns / compiled.device_ns:.2f}x)")
    for g in ndb.get_dynamo_metrics():
        print(f"  {g.graph_name:24s} {g.ops:4d} ops {g.sim_run_ns / 1e3:9.1f} us, simulated "
              f"compile {g.sim_compile_ns / 1e9:.1f} s, {g.cost_source[:60]}")


if __name__ == "__main__":
    main()
