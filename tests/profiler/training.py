"""A small training step on 'neuron' for the trace tests: two Linear layers, GELU, AdamW."""

import torch


def small_training_step(opt_cls=torch.optim.AdamW, warm_steps=1, log_loss=False, **opt_kw):
    """Returns step(): one forward, backward and optimizer update (AdamW unless `opt_cls`), then
    a synchronize (run `warm_steps` times here, so programs are cached and the profiled steps
    are steady-state; the optimizer state exists from the second step on). `log_loss` reads the
    loss with .item() before the backward: a sync point inside the step."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                            torch.nn.Linear(512, 256)).to("neuron")
    opt = opt_cls(m.parameters(), **opt_kw)
    x = torch.randn(64, 256, device="neuron")

    def step():
        opt.zero_grad()
        loss = m(x).pow(2).mean()
        if log_loss:
            loss.item()
        loss.backward()
        opt.step()
        torch.neuron.synchronize()
    for _ in range(warm_steps):
        step()
    return step
