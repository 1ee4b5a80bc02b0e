"""Integration points libraries reach through PrivateUse1: Dynamo's device interface, backend
tensor metadata, SDPA's OVERRIDEABLE backend, the autograd profiler with use_device."""

import io

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def test_dynamo_device_interface():
    from torch._dynamo.device_interface import get_interface_for_device
    iface = get_interface_for_device("neuron")
    assert iface is get_interface_for_device(torch.device("neuron", 1))
    assert iface.device_count() == 4 and iface.is_available()
    assert iface.get_compute_capability() == (3, 0)
    assert iface.Worker.get_device_properties(0).name == "Trainium2"
    with iface.device(1):
        assert iface.current_device() == 1
        assert iface.current_stream().device == torch.device("neuron", 1)
    event = iface.Event(device="neuron", enable_timing=True)
    event.record()
    iface.synchronize()
    assert event.query()


def test_backend_metadata_round_trips():
    x = torch.ones(2, 3, device="neuron")
    assert torch._utils.get_tensor_metadata(x) == {}
    torch._utils.set_tensor_metadata(x, {"version_number": True, "format_number": False})
    want = {"version_number": True, "format_number": False}
    assert torch._utils.get_tensor_metadata(x) == want
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    y = torch.load(buf)
    assert y.device == torch.device("neuron", 0) and torch._utils.get_tensor_metadata(y) == want
    assert torch._utils.get_tensor_metadata(x.detach()) == want            # shallow copies
    assert torch._utils.get_tensor_metadata(torch.nn.Parameter(x)) == want
    assert torch._utils.get_tensor_metadata(x.clone()) == {}                # a new tensor, as on CUDA


def _qkv(dtype=torch.float32, shape=(2, 3, 16, 8)):
    torch.manual_seed(0)
    return [torch.rand(shape, dtype=dtype) for _ in range(3)]


def test_sdpa_choice_is_overrideable():
    q, k, v = (t.to("neuron") for t in _qkv(torch.float16))
    assert torch._fused_sdp_choice(q, k, v) == SDPBackend.OVERRIDEABLE.value
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.1) == SDPBackend.MATH.value


@pytest.mark.parametrize("causal,with_mask", [(False, False), (True, False), (False, True)])
def test_sdpa_overrideable_equals_cpu_math(causal, with_mask):
    q, k, v = _qkv()
    mask = torch.rand(2, 3, 16, 16) if with_mask else None
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    dev = [t.to("neuron").requires_grad_() for t in (q, k, v)]
    mask_c = mask.clone().requires_grad_() if with_mask else None
    mask_d = mask.to("neuron").requires_grad_() if with_mask else None
    with sdpa_kernel(SDPBackend.MATH):
        want = F.scaled_dot_product_attention(*cpu, attn_mask=mask_c, is_causal=causal)
    got = F.scaled_dot_product_attention(*dev, attn_mask=mask_d, is_causal=causal)
    assert got.grad_fn.name() == "ScaledDotProductFusedAttentionOverrideableBackward0"
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad.to("neuron"))
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)
    for c, d in zip(cpu + ([mask_c] if with_mask else []), dev + ([mask_d] if with_mask else [])):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-5)


def test_sdpa_overrideable_ops_directly():
    q, k, v = (t.to("neuron") for t in _qkv(torch.float16))
    bias = torch.rand(2, 3, 16, 16, dtype=torch.float16).to("neuron")
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, attn_bias=bias)
    grads = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        torch.rand_like(q), q, k, v, bias, [True, True, True, True], out[0], out[1], out[2],
        out[3], out[4], out[5], dropout_p=0.0, is_causal=False, philox_seed=out[6],
        philox_offset=out[7])
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape, bias.shape]
    with sdpa_kernel(SDPBackend.MATH):
        want = F.scaled_dot_product_attention(*(t.cpu().float() for t in (q, k, v)),
                                              attn_mask=bias.cpu().float())
    torch.testing.assert_close(out[0].cpu().float(), want, rtol=2e-3, atol=2e-3)


def test_autograd_profiler_with_use_device(capfd):
    from torch.autograd.profiler import profile
    x = torch.randn(32, 32, device="neuron")
    with profile(use_device="neuron") as prof:
        y = (x @ x).relu()
        torch.neuron.synchronize()
    del y
    assert "PrivateUse1 used in profiler but not enabled" not in capfd.readouterr().err
    rows = {e.key: e for e in prof.key_averages()}
    assert "aten::mm" in rows and "aten::relu" in rows
    for e in prof.key_averages():
        assert 0 <= e.self_cpu_time_total <= e.cpu_time_total < 60e6     # microseconds
