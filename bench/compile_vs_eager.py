"""Simulated training step of a GPT, eager (Adaptive Eager Execution on) against
torch.compile(backend="neuron") (model and AdamW step compiled), with the per-engine explanation.

Two models: the demo GPT (examples/gpt: 4 layers, hidden 256, seq 128, batch 8) and a
20M-parameter GPT (6 layers, hidden 512, vocab 2048, seq 128, batch 8). Both steps run the same
CPU kernels; only the simulated time differs. A compiled graph is one program: its intermediates
stay on chip where they fit and independent work overlaps across its ops, where eager groups of
up to 32 queued ops write every result back to HBM.

Last line: RESULT demo_compiled_ms=.. demo_eager_ms=.. gpt20m_compiled_ms=.. gpt20m_eager_ms=..
Run: .venv/bin/python bench/compile_vs_eager.py   (a few minutes: lowering both models cold)
"""

from __future__ import annotations

import os
import sys

import torch

import torch_neuronx.neuron_dynamo_backend as ndb
from neuron_sim.progress import progress

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "gpt"))
from gpt_model import GPTConfig, neuron_trainer  # noqa: E402

MODELS = {
    "demo": (GPTConfig(), 8),
    "gpt20m": (GPTConfig(vocab_size=2048, n_layer=6, n_head=8, n_embd=512, block_size=128), 8),
}


def main():
    results = {}
    for name, (cfg, batch) in progress(MODELS.items(), "models, eager and compiled", " models"):
        torch._dynamo.reset()
        eager_step, eager_losses, params = neuron_trainer(cfg, batch, False)
        compiled_step, compiled_losses, _ = neuron_trainer(cfg, batch, True)
        for _ in range(2):                      # warm-up: compile, fill the program caches
            eager_step()
            compiled_step()
        eager = ndb.measure_step(eager_step)
        compiled = ndb.measure_step(compiled_step)
        print(f"{name}: {params / 1e6:.1f}M parameters, batch {batch}, seq {cfg.block_size}; "
              f"loss eager {eager_losses[-1]:.5f} compiled {compiled_losses[-1]:.5f}")
        print(ndb.compare(eager, compiled))
        print()
        results[name] = (compiled.device_ns / 1e6, eager.device_ns / 1e6)
    print("RESULT " + " ".join(f"{n}_compiled_ms={c:.3f} {n}_eager_ms={e:.3f}"
                               for n, (c, e) in results.items()))


if __name__ == "__main__":
    main()
