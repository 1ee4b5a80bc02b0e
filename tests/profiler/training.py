"""A small training step on 'neuron' for the trace tests: two Linear layers, GELU, AdamW."""

import torch


def small_training_step():
    """Returns step(): one forward, backward and AdamW update, then a synchronize (run once
    here, so programs are cached and the profiled steps are steady-state)."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                            torch.nn.Linear(512, 256)).to("neuron")
    opt = torch.optim.AdamW(m.parameters())
    x = torch.randn(64, 256, device="neuron")

    def step():
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        torch.neuron.synchronize()
    step()
    return step
