"""Grouped-query attention on the device: `F.scaled_dot_product_attention(..., enable_gqa=True)`
(what Hugging Face's Llama-3 / Mistral / Qwen pass without an attention mask) takes the fused
OVERRIDEABLE path, as multi-head attention does: results equal CPU PyTorch's (forward and
backward), and the simulator sees one flash-attention op per direction over the real K/V heads
instead of the math path's materialised scores."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx


def _leaves(*tensors, device="cpu"):
    return [t.detach().to(device).requires_grad_() for t in tensors]


@pytest.mark.parametrize("dtype, kw", [
    (torch.float32, {}), (torch.bfloat16, {}), (torch.float32, {"is_causal": True}),
    (torch.bfloat16, {"is_causal": True}),
    # FP32 only: CPU computes a mask that needs a gradient on its math path, in BF16 too
    (torch.float32, {"attn_mask": "bias"})], ids=["fp32", "bf16", "fp32-causal", "bf16-causal",
                                                  "fp32-mask"])
def test_gqa_equals_cpu_forward_and_backward(dtype, kw):
    torch.manual_seed(0)
    q = torch.randn(2, 8, 40, 16, dtype=dtype)
    k, v = torch.randn(2, 2, 40, 16, dtype=dtype), torch.randn(2, 2, 40, 16, dtype=dtype)
    grad = torch.randn(2, 8, 40, 16, dtype=dtype)
    cpu = _leaves(q, k, v)
    dev = _leaves(q, k, v, device="neuron")
    # CPU runs the same flash kernel (bit-equal), except with a mask that needs a gradient
    # (CPU's math path; the device's bias gradient is computed in FP32): default tolerances.
    exact = {"rtol": 0, "atol": 0} if "attn_mask" not in kw else {}
    if kw.get("attn_mask") == "bias":          # a per-head additive mask: its gradient too
        bias = torch.randn(1, 8, 40, 40, dtype=dtype)
        cpu.append(bias.clone().requires_grad_())
        dev.append(bias.to("neuron").requires_grad_())
        kw = {}
    ref = F.scaled_dot_product_attention(*cpu[:3], attn_mask=cpu[3] if len(cpu) > 3 else None,
                                         enable_gqa=True, **kw)
    out = F.scaled_dot_product_attention(*dev[:3], attn_mask=dev[3] if len(dev) > 3 else None,
                                         enable_gqa=True, **kw)
    assert "FusedAttentionOverrideable" in type(out.grad_fn).__name__, out.grad_fn
    ref.backward(grad)
    out.backward(grad.to("neuron"))
    torch.testing.assert_close(out.cpu(), ref, **exact)
    for got, want in zip(dev, cpu):
        assert got.grad.shape == want.grad.shape
        torch.testing.assert_close(got.grad.cpu(), want.grad, **exact)


def test_heads_that_do_not_divide_take_the_math_path_and_raise_as_cpu():
    q, k = torch.randn(1, 6, 8, 4), torch.randn(1, 4, 8, 4)
    with pytest.raises(RuntimeError) as cpu_error:
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    with pytest.raises(RuntimeError) as dev_error:
        F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), k.to("neuron"),
                                       enable_gqa=True)
    assert str(dev_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]


def _sdpa_ms(kv_heads, math=False, S=2048):
    """Simulated ms of one GQA attention forward + backward (32 query heads, head size 128,
    BF16, causal) in time-only mode (no host compute; timed as normal execution); math=True:
    SDPA's math path (what the device ran for GQA before), scores materialised."""
    with torch_neuronx.time_only():
        q, k, v, g = (torch.empty(1, h, S, 128, dtype=torch.bfloat16, device="neuron")
                      for h in (32, kv_heads, kv_heads, 32))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        torch.neuron.synchronize()
        start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
        sdpa = partial(torch.ops.aten._scaled_dot_product_attention_math if math
                       else F.scaled_dot_product_attention, is_causal=True,
                       enable_gqa=kv_heads != 32)
        start.record()
        out = sdpa(q, k, v)
        (out[0] if math else out).backward(g)
        end.record()
        torch.neuron.synchronize()
    return start.elapsed_time(end)


def test_gqa_is_timed_as_one_flash_kernel():
    # Measured (trn2.3xlarge, LNC=2): GQA 32/8 heads, seq 2048, fwd+bwd causal 3.86 ms, MHA
    # 3.93 ms (GQA stores 4x smaller dK/dV); the math path 19.5 ms.
    before = dict(torch_neuronx.estimated_ops())
    gqa, mha = _sdpa_ms(8), _sdpa_ms(32)
    math = _sdpa_ms(8, math=True)
    assert gqa < 0.5 * math, (gqa, math)
    assert 0.9 * mha < gqa <= mha, (gqa, mha)
    torch.neuron.synchronize()
    new = {n for n, c in torch_neuronx.estimated_ops().items() if c != before.get(n)}
    assert not {n for n in new if "attention" in n}, new
