"""Scaled dot-product attention's gradients under torch.compile: the layout the fake kernel
predicts is the one the device's kernel returns.

The backward of 'neuron''s OVERRIDEABLE attention (backend/csrc/aten/Attention.cpp) is CPU's
flash backward, whose dQ, dK and dV are stored [B, S, H, D] (heads inner) whatever the inputs'
layout, as PyTorch's meta kernel for that CPU op says. PyTorch's meta kernel for the OVERRIDEABLE
op predicts the inputs' layout instead, so AOT autograd traced `grad.reshape(...)` of a
contiguous query's gradient as a view, which the real gradient cannot take ("view size is not
compatible with input tensor's size and stride"). Eager is unaffected: its reshapes see the
real strides, as on CPU.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_impls import register_op_impl

_HEADS_INNER = (0, 2, 1, 3)  # [B, H, S, D] sizes, stored [B, S, H, D]


@register_op_impl(torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward.default)
def _fake_backward(fake_mode, func, grad_out, query, key, value, attn_bias, *args, **kwargs):
    if query.device.type != "neuron":
        return NotImplemented                      # another device's kernel: PyTorch's meta
    with fake_mode:
        grads = [torch.empty_permuted(t.shape, _HEADS_INNER, dtype=t.dtype, device=t.device)
                 for t in (query, key, value)]
        # The bias gradient is reshaped from a contiguous FP32 tensor.
        bias = None if attn_bias is None else attn_bias.new_empty(attn_bias.shape)
    return (*grads, bias)
