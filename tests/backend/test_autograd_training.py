"""Autograd and training on 'neuron' give CPU's numbers."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt"))
from gpt_model import GPT, GPTConfig, make_batch, train_step  # noqa: E402


def _train(device, steps=3, **opt_kwargs):
    torch.manual_seed(0)
    cfg = GPTConfig(n_layer=2, n_embd=64, n_head=4, block_size=32, vocab_size=128)
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, **opt_kwargs)
    x, y = (t.to(device) for t in make_batch(cfg, 4))
    losses = [train_step(model, opt, x, y).item() for _ in range(steps)]
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_gpt_training_matches_cpu():
    # AdamW picks its foreach path on 'neuron' by default and the per-tensor path on CPU;
    # with the same path chosen explicitly both devices run the same kernels bit for bit.
    cpu_losses, cpu_state = _train("cpu", foreach=False)
    neuron_losses, neuron_state = _train("neuron", foreach=False)
    assert neuron_losses == cpu_losses  # same CPU kernels on the same bytes: bit-identical
    assert neuron_losses[-1] < neuron_losses[0]
    for name, value in cpu_state.items():
        assert torch.equal(neuron_state[name], value), name


def test_foreach_and_fused_optimizers_match_cpu():
    for kwargs in ({"foreach": True}, {"fused": True}):
        assert _train("cpu", steps=2, **kwargs)[0] == _train("neuron", steps=2, **kwargs)[0]


def test_autograd_through_inplace_on_view():
    x = torch.randn(4, 4, requires_grad=True)
    xn = x.detach().to("neuron").requires_grad_()
    for t in (x, xn):
        y = t * 1
        y[:, 1].mul_(3)
        y.t().add_(1)
        y.sum().backward()
    assert torch.equal(xn.grad.cpu(), x.grad)


def test_views_share_storage():
    a = torch.zeros(3, 4, device="neuron")
    v = a.view(12)
    v[5] = 7
    assert a[1, 1].item() == 7
    a.t()[2].fill_(1)
    assert torch.equal(a[:, 2].cpu(), torch.ones(3))
    s = a[:, ::2]
    assert s.stride() == (4, 2) and s.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
