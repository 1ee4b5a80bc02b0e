"""Scaled dot-product attention compiled with backend="neuron": outputs and gradients equal CPU
PyTorch's eager ones, with or without a reshape after it, and the gradient layouts the
compiled backward is traced with (fake tensors) are the ones the device's kernel returns."""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import torch_neuronx  # noqa: F401

B, H, S, D = 2, 4, 6, 8


def _contiguous(h):
    return torch.randn(B, h, S, D)


def _heads_inner(h):           # what a projection's .view(B, S, H, D).transpose(1, 2) gives
    return torch.randn(B, S, h, D).transpose(1, 2)


def _seq_outer(h):             # nn.MultiheadAttention's [S, B, E] inputs
    return torch.randn(S, B, h, D).permute(1, 2, 0, 3)


def _gradient_strides(q, k, v, **kw):
    strides = {}
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    for i, leaf in enumerate(leaves):   # a hook sees the kernel's gradient, before accumulation
        leaf.register_hook(lambda g, i=i: strides.__setitem__(i, g.stride()))
    F.scaled_dot_product_attention(*leaves, **kw).sum().backward()
    return [strides[i] for i in range(3)]


@pytest.mark.parametrize("layout", [_contiguous, _heads_inner, _seq_outer])
@pytest.mark.parametrize("kv_heads", [H, 2], ids=["mha", "gqa"])
def test_fake_gradient_layout_is_the_kernels(layout, kv_heads):
    torch.manual_seed(0)
    q, k, v = layout(H), layout(kv_heads), layout(kv_heads)
    kw = {"is_causal": True, "enable_gqa": kv_heads != H}
    # On the device, in the inputs' layout (.to("neuron") would make them contiguous).
    dev = [t.to("neuron").as_strided(t.shape, t.stride()) for t in (q, k, v)]
    real = _gradient_strides(*dev, **kw)
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(t) for t in dev]
    with mode:
        fake = _gradient_strides(*fakes, **kw)
    assert fake == real


def _distinct_qkv(kv_heads):     # viewed as [B, heads, S, D]: backward views the gradients
    return [torch.randn(B, H * S * D), torch.randn(B, kv_heads * S * D),
            torch.randn(B, kv_heads * S * D)]


def _projected(kv_heads):       # a decoder layer's input and Q/K/V projection weights
    return [torch.randn(B, S, H * D), torch.randn(H * D, H * D),
            torch.randn(H * D, kv_heads * D), torch.randn(H * D, kv_heads * D)]


def _attend(inputs, causal, merge):
    if len(inputs) == 3:
        q, k, v = (t.view(B, -1, S, D) for t in inputs)
    else:
        x, wq, wk, wv = inputs
        q, k, v = ((x @ w).view(B, S, -1, D).transpose(1, 2) for w in (wq, wk, wv))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                         enable_gqa=k.shape[1] != q.shape[1])
    return out.transpose(1, 2).reshape(B, S, H * D) if merge else out


@pytest.mark.parametrize("inputs", [_distinct_qkv, _projected])
@pytest.mark.parametrize("kv_heads", [H, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("merge", [False, True], ids=["heads", "merged"])
def test_compiled_attention_equals_cpu(inputs, kv_heads, causal, merge):
    torch.manual_seed(0)
    tensors = inputs(kv_heads)
    weight = torch.randn_like(_attend(tensors, causal, merge))

    def loss(*ts):
        return (_attend(ts, causal, merge) * weight.to(ts[0].device)).sum()

    cpu = [t.clone().requires_grad_() for t in tensors]
    dev = [t.to("neuron").requires_grad_() for t in tensors]
    want = loss(*cpu)
    want.backward()
    got = torch.compile(loss, backend="neuron")(*dev)
    got.backward()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-4)
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-5)
