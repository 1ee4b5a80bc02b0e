"""Compiled training of a small GPT on the simulated device: forward and backward graphs from
AOT Autograd plus a compiled AdamW step, against eager, with the per-engine explanation.

Run: .venv/bin/python examples/compile/train_step.py [--steps 5]
"""

import argparse

import torch

import torch_neuronx.neuron_dynamo_backend as ndb
from tiny_gpt import batch, make


def trainer(model, compiled, **batch_kwargs):
    """One training step (eager, or with the optimizer step compiled too) and its loss log."""
    x, y = batch(**batch_kwargs)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = torch.compile(opt.step, backend="neuron") if compiled else opt.step
    losses = []

    def one_step():
        loss = model(x, y)
        loss.backward()
        step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return one_step, losses


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args()
    ndb.set_model_name("TinyGPT")
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
    print(f"simulated speed-up {eager.device_ns / compiled.device_ns:.2f}x")


if __name__ == "__main__":
    main()
