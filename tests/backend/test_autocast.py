"""torch.autocast(device_type="neuron")."""

import pytest
import torch


def test_bf16_autocast_casts_matmuls_not_softmax():
    a = torch.randn(8, 8, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        mm = a @ a
        lin = torch.nn.functional.linear(a, a)
        sm = torch.softmax(mm, dim=-1)
    assert mm.dtype == lin.dtype == torch.bfloat16
    assert sm.dtype == torch.float32  # fp32 policy op
    ref = (a.cpu().bfloat16() @ a.cpu().bfloat16())
    assert torch.equal(mm.cpu(), ref)


def test_default_autocast_dtype_is_privateuse1_default():
    assert torch.get_autocast_dtype("neuron") == torch.float16
    assert torch.float16 in torch.neuron.get_amp_supported_dtype()


def test_binary_cross_entropy_is_banned():
    p = torch.rand(4, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            torch.nn.functional.binary_cross_entropy(p, p)
