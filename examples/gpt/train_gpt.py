"""`make demo`: train a small GPT-style model on the simulated Trainium device.

Ordinary PyTorch: the same script runs on a real Trn2 instance under TorchNeuron. It prints
the falling loss, the simulated step time (torch.Event timing is simulated device time) and
the wall time this laptop spent.
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_model import GPT, GPTConfig, make_batch, train_step  # noqa: E402


def main(steps: int = 8, batch: int = 8):
    torch.manual_seed(0)
    device = "neuron"
    cfg = GPTConfig()
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = (t.to(device) for t in make_batch(cfg, batch))

    print(f"device: {torch.accelerator.current_accelerator()} x{torch.accelerator.device_count()}, "
          f"instance {torch.neuron.get_device_properties(0).instance}")
    print(f"model: {cfg.n_layer} layers, hidden {cfg.n_embd}, seq {cfg.block_size}, batch {batch}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    for step in range(steps):
        wall = time.perf_counter()
        start.record()
        loss = train_step(model, opt, x, y)
        end.record()
        loss_value = loss.item()                       # a sync point, as on hardware
        wall_ms = 1e3 * (time.perf_counter() - wall)
        print(f"step {step}: loss {loss_value:.4f}   simulated step {start.elapsed_time(end):8.3f} ms"
              f"   wall {wall_ms:7.1f} ms")
    import torch_neuronx
    report = getattr(torch_neuronx, "timing_report", None)
    if report is not None:
        # one more step, timed per op and per engine (issue 5 breakdown), then the same step
        # without Adaptive Eager Execution (every op its own program and launch)
        torch_neuronx.reset_timing_stats()
        start.record()
        train_step(model, opt, x, y)
        end.record()
        aee_ms = start.elapsed_time(end)
        print(report())
        torch_neuronx.set_adaptive_eager(False)
        start.record()
        train_step(model, opt, x, y)
        end.record()
        torch_neuronx.set_adaptive_eager(None)
        print(f"Adaptive Eager Execution: simulated step {aee_ms:.3f} ms with fusion, "
              f"{start.elapsed_time(end):.3f} ms with every op launched on its own")


if __name__ == "__main__":
    main()
