"""Compiled training of a small GPT on the simulated device: forward and backward graphs from
AOT Autograd plus a compiled AdamW step, against eager, with the per-engine explanation and
each compiled graph's simulated time.

Run: .venv/bin/python examples/compile/train_step.py [--steps 5] [--demo]
(--demo: the demo GPT of examples/gpt, as `make demo` trains it, instead of tiny_gpt)
"""

import argparse
import os
import sys

import torch

import torch_neuronx.neuron_dynamo_backend as ndb
from tiny_gpt import batch, make

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpt"))
from gpt_model import GPTConfig, neuron_trainer, stepper  # noqa: E402


def trainer(model, compiled, **batch_kwargs):
    """One training step (eager, or with the optimizer step compiled too) and its loss log."""
    x, y = batch(**batch_kwargs)
    return stepper(model, torch.optim.AdamW(model.parameters(), lr=1e-3), x, y,
                   compile_step=compiled)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--demo", action="store_true")
    args = p.parse_args()
    ndb.set_model_name("GPT" if args.demo else "TinyGPT")
    if args.demo:
        eager_step, eager_losses, _ = neuron_trainer(GPTConfig(), 8, compiled=False)
        compiled_step, compiled_losses, _ = neuron_trainer(GPTConfig(), 8, compiled=True)
    else:
        eager_step, eager_losses = trainer(make(), compiled=False)
        compiled_step, compiled_losses = trainer(torch.compile(make(), backend="neuron"),
                                                 compiled=True)
    for _ in range(args.steps - 1):
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
