"""Shared Parameters and buffers stay shared when a model moves to 'neuron', as on CUDA.

Weight tying (an LM head that reuses the input embedding) used to be undone by
`model.to("neuron")`: the model gained a parameter, trained differently from CPU, and took
twice the memory. These tests check identity, the parameter count, device memory (one copy)
and one training step against CPU for the conversions Module._apply serves.
"""

import copy

import pytest
import torch
import torch.nn as nn


class TiedLM(nn.Module):
    """Embedding and output head share one weight, as GPT-2, Gemma, OPT and BLOOM do."""

    def __init__(self, vocab=64, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, dim))
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.mlp(self.embed(tokens))))


class SharedLinear(nn.Module):
    """One Parameter used by two Linear layers (and one bias shared too)."""

    def __init__(self, dim=16):
        super().__init__()
        self.a = nn.Linear(dim, dim)
        self.b = nn.Linear(dim, dim)
        self.b.weight = self.a.weight
        self.b.bias = self.a.bias

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class WithBuffer(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.register_buffer("scale", scale)

    def forward(self, x):
        return self.lin(x) * self.scale


class SharedBuffer(nn.Module):
    """Two submodules registered with the same buffer tensor."""

    def __init__(self):
        super().__init__()
        scale = torch.linspace(0.5, 1.5, 16)
        self.first = WithBuffer(scale)
        self.second = WithBuffer(scale)

    def forward(self, x):
        return self.second(self.first(x))


def tied_pairs(model):
    return [(model.head.weight, model.embed.weight)]


def shared_linear_pairs(model):
    return [(model.a.weight, model.b.weight), (model.a.bias, model.b.bias)]


def shared_buffer_pairs(model):
    return [(model.first.scale, model.second.scale)]


CASES = {
    "tied_embedding": (TiedLM, tied_pairs, lambda: torch.randint(0, 64, (4, 8))),
    "shared_linear": (SharedLinear, shared_linear_pairs, lambda: torch.randn(4, 16)),
    "shared_buffer": (SharedBuffer, shared_buffer_pairs, lambda: torch.randn(4, 16)),
}


def build(name):
    cls, pairs, make_input = CASES[name]
    torch.manual_seed(0)
    return cls(), pairs, make_input()


def assert_shared(pairs, device):
    for x, y in pairs:
        assert x is y, "a shared tensor was split in two by the conversion"
        assert x.device.type == device


def one_copy_bytes(model):
    """Device memory that one copy of each distinct parameter and buffer takes (the same
    allocations made afresh, so the allocator's rounding is the same)."""
    distinct = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    copies = [torch.empty_like(t, device="neuron") for t in distinct.values()]
    used = torch.neuron.memory_allocated() - before
    del copies
    return used


CONVERSIONS = {
    "to_string": lambda m: m.to("neuron"),
    "to_device": lambda m: m.to(torch.device("neuron", 0)),
    "to_kwargs": lambda m: m.to(device="neuron", non_blocking=True),
    "neuron_helper": lambda m: m.neuron(),
    "to_empty": lambda m: m.to_empty(device="neuron"),
}


@pytest.mark.parametrize("conversion", CONVERSIONS)
@pytest.mark.parametrize("name", CASES)
def test_identity_and_memory_after_conversion(name, conversion):
    model, pairs, _ = build(name)
    cpu_count = len(list(model.parameters()))
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    CONVERSIONS[conversion](model)
    torch.neuron.synchronize()
    peak = torch.neuron.max_memory_allocated()
    assert_shared(pairs(model), "neuron")
    assert len(list(model.parameters())) == cpu_count
    # One copy of each shared tensor on the device, and none made and freed on the way.
    used = torch.neuron.memory_allocated() - before
    assert used == one_copy_bytes(model)
    assert peak - before == used
    # Back to the host, and dtype casts on the device, keep the sharing too.
    model.to(torch.bfloat16)
    assert_shared(pairs(model), "neuron")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    model.cpu()
    assert_shared(pairs(model), "cpu")
    del model
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == before


def test_untied_count_would_differ():
    """The check above can fail: a model whose tie was undone has one more parameter."""
    model, _, _ = build("tied_embedding")
    tied = len(list(model.parameters()))
    model.head.weight = nn.Parameter(model.embed.weight.detach().clone())
    assert len(list(model.parameters())) == tied + 1


def train_step(model, x, device):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    out = model(x.to(device))
    loss = out.float().pow(2).mean() if out.is_floating_point() else out.sum()
    loss.backward()
    grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()}
    opt.step()
    # A second forward sees the updated (still shared) weights.
    loss2 = model(x.to(device)).float().pow(2).mean()
    return model, loss.item(), loss2.item(), grads


@pytest.mark.parametrize("name", CASES)
def test_training_step_matches_cpu(name):
    model, pairs, x = build(name)
    cpu_model, cpu_loss, cpu_loss2, cpu_grads = train_step(copy.deepcopy(model), x, "cpu")
    neuron_model, loss, loss2, grads = train_step(model, x, "neuron")
    assert_shared(pairs(neuron_model), "neuron")
    assert grads.keys() == cpu_grads.keys()          # named_parameters lists a shared one once
    torch.testing.assert_close(loss, cpu_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss2, cpu_loss2, rtol=1e-5, atol=1e-6)
    for n in grads:
        torch.testing.assert_close(grads[n], cpu_grads[n], rtol=1e-5, atol=1e-6, msg=n)
    for (n, p), (_, q) in zip(neuron_model.named_parameters(), cpu_model.named_parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6, msg=n)


def test_grads_and_optimizer_built_before_conversion_follow_the_model():
    model, pairs, x = build("tied_embedding")
    reference = copy.deepcopy(model)
    # A gradient and an optimizer made on CPU before the move.
    model(x).pow(2).mean().backward()
    reference(x).pow(2).mean().backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    params_before = list(model.parameters())
    model.to("neuron")
    assert [p is q for p, q in zip(model.parameters(), params_before)] == [True] * len(params_before)
    assert_shared(pairs(model), "neuron")
    assert model.embed.weight.grad.device.type == "neuron"
    assert model.head.weight.grad is model.embed.weight.grad
    opt.step()                      # the optimizer still holds the model's Parameters
    ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-6, atol=1e-7)


def test_meta_initialised_model_is_tied_again_like_on_cuda():
    """to_empty from 'meta' makes new Parameters on CUDA too; tie_weights-style re-tying works."""
    with torch.device("meta"):
        model = TiedLM()
    model.to_empty(device="neuron")
    model.head.weight = model.embed.weight
    assert_shared(tied_pairs(model), "neuron")
    assert len(list(model.parameters())) == len(list(TiedLM().parameters()))


def test_swap_tensors_conversion_keeps_sharing_and_grads():
    """With PyTorch's opt-in swap_tensors path for conversions, as with the default path."""
    model, pairs, x = build("tied_embedding")
    reference = copy.deepcopy(model)
    model(x).pow(2).mean().backward()
    reference(x).pow(2).mean().backward()
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to("neuron")
        assert_shared(pairs(model), "neuron")
        assert model.head.weight.grad is model.embed.weight.grad
        assert model.embed.weight.grad.device.type == "neuron"
        torch.testing.assert_close(model.embed.weight.grad.cpu(), reference.embed.weight.grad)
        model.to_empty(device="cpu")
        assert_shared(pairs(model), "cpu")
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)


def test_optimizer_state_made_on_cpu_continues_on_neuron():
    """AdamW state from CPU steps, loaded after the move (load_state_dict puts it on the
    Parameters' device), continues exactly like the CPU run, with one state per shared weight."""
    model, pairs, x = build("tied_embedding")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    # Deep copies: load_state_dict keeps CPU 'step' tensors as they are, which would make
    # the two optimizers count steps in one tensor.
    ref_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    model.to("neuron")
    assert_shared(pairs(model), "neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt.load_state_dict(copy.deepcopy(ref_opt.state_dict()))
    assert len(opt.state) == len(list(model.parameters()))
    assert all(s["exp_avg"].device.type == "neuron" for s in opt.state.values())
    for m, o, inp in ((model, opt, x.to("neuron")), (reference, ref_opt, x)):
        o.zero_grad()
        m(inp).pow(2).mean().backward()
        o.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
