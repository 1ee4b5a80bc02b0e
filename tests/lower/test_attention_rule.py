"""Fused attention (`F.scaled_dot_product_attention` on the device runs CPU's flash kernels
`_scaled_dot_product_flash_attention_for_cpu` and its backward as one op each) lowers to a
flash-attention program instead of the roofline estimate.

Bounds for each time, from the data sheet (neuron_sim.hardware):
- lower: max(TensorE at peak for the products, HBM traffic of q, k, v, out (+ grads)); the
  forward does 4 S_q S_k D FLOPs per head (QK^T, PV), the backward 10 (S, dP, dV, dK, dQ).
- upper: 4 x (TensorE bound + one VectorE pass over the S_q x S_k scores at one FP32 element per
  cycle and partition + the HBM bound), i.e. the engines' minimum work done one after another
  with 4x for a tile loop's per-instruction fixed costs (times forward x 2.5 for the backward)."""

import pytest

from neuron_sim.hardware import get_chip
from neuron_sim.lower import OpSpec, TensorSpec
from neuron_sim.lower.api import lower_op
from neuron_sim.lower.registry import LoweringError

FWD = "aten::_scaled_dot_product_flash_attention_for_cpu"
BWD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
CHIP = get_chip("trn2")


def _fwd(B, H, S, D, causal=False, dtype="bfloat16", mask=None, kv_heads=None):
    q, kv = TensorSpec((B, H, S, D), dtype), TensorSpec((B, kv_heads or H, S, D), dtype)
    return OpSpec(FWD, (q, kv, kv, 0.0, causal, mask, None),
                  (q, TensorSpec((B, H, S), "float32")))


def _bwd(B, H, S, D, causal=False, dtype="bfloat16", kv_heads=None):
    q, kv = TensorSpec((B, H, S, D), dtype), TensorSpec((B, kv_heads or H, S, D), dtype)
    return OpSpec(BWD, (q, q, kv, kv, q, TensorSpec((B, H, S), "float32"), 0.0, causal, None,
                        None), (q, kv, kv))


def _bounds(B, H, S, D, backward):
    work = 2.5 if backward else 1.0
    te = work * 4 * B * H * S * S * D / CHIP.tensor_peak_flops("bfloat16")
    hbm = (8 if backward else 4) * B * H * S * D * 2 / CHIP.hbm_bytes_per_s_per_core
    scores = work * B * H * S * S / 128 / CHIP.vector_clock_hz
    return max(te, hbm) * 1e9, 4 * (te + scores + hbm) * 1e9


@pytest.mark.parametrize("shape", [(1, 8, 512, 64), (1, 8, 512, 128), (2, 4, 1024, 128),
                                   (1, 2, 4096, 128)])
@pytest.mark.parametrize("backward", [False, True])
def test_time_between_data_sheet_bounds(shape, backward):
    t = lower_op((_bwd if backward else _fwd)(*shape))
    lo, hi = _bounds(*shape, backward)
    assert not t.estimated
    assert lo < t.total_ns < hi, f"{shape} backward={backward}: {t.total_ns:.0f} ns not in " \
                                 f"({lo:.0f}, {hi:.0f})"
    assert t.engine_ns["TensorE"] > 0 and t.engine_ns["ScalarE"] > 0


@pytest.mark.parametrize("backward", [False, True])
def test_causal_is_about_half_at_long_sequences(backward):
    make = _bwd if backward else _fwd
    full = lower_op(make(1, 2, 8192, 128))
    causal = lower_op(make(1, 2, 8192, 128, causal=True))
    assert 0.4 < causal.flops / full.flops < 0.6
    assert 0.4 < causal.total_ns / full.total_ns < 0.65, causal.total_ns / full.total_ns


def test_mask_and_small_shapes_lower():
    mask = TensorSpec((1, 1, 100, 100), "float32")
    t = lower_op(_fwd(2, 3, 100, 16, dtype="float32", mask=mask))
    plain = lower_op(_fwd(2, 3, 100, 16, dtype="float32"))
    assert not t.estimated and t.total_ns > plain.total_ns     # the mask tile load + add
    assert lower_op(_bwd(1, 1, 1, 8)).total_ns > 0


def test_sdpa_on_device_equals_cpu_and_is_not_estimated():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    import torch_neuronx

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 16, requires_grad=True) for _ in range(3))
    bias = torch.randn(40, 40)
    before = dict(torch_neuronx.estimated_ops())
    for kw in ({"is_causal": True}, {"attn_mask": bias}, {}):
        ref = F.scaled_dot_product_attention(q, k, v, **kw)
        ref.sum().backward()
        grads = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        qn, kn, vn = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
        kwn = {n: (x.to("neuron") if torch.is_tensor(x) else x) for n, x in kw.items()}
        out = F.scaled_dot_product_attention(qn, kn, vn, **kwn)
        out.sum().backward()
        torch.testing.assert_close(out.cpu(), ref)
        for got, want in zip((qn.grad, kn.grad, vn.grad), grads):
            torch.testing.assert_close(got.cpu(), want)
    torch.neuron.synchronize()
    after = torch_neuronx.estimated_ops()
    new = {n: c for n, c in after.items() if c != before.get(n)}
    assert not {n for n in new if "attention" in n}, f"estimated attention ops: {new}"


def test_head_sizes_and_long_sequences():
    assert not lower_op(_bwd(1, 2, 1024, 256)).estimated          # dK/dV products per bank
    assert not lower_op(_bwd(1, 8, 8192, 128)).estimated          # one head resident at a time
    assert not lower_op(_fwd(1, 4, 32768, 128, causal=True)).estimated
    with pytest.raises(LoweringError, match="16384 keys and head size 128 .* 144 KiB"):
        lower_op(_bwd(1, 2, 16384, 128))


@pytest.mark.parametrize("backward, kv_loads", [(False, 2), (True, 5)])
def test_gqa_loads_each_kv_head_once_per_group(backward, kv_loads):
    # 8 query heads on 2 K/V heads, small enough to be simulated whole (no extrapolation): the
    # HBM traffic saved is exactly the K/V loads of the 6 heads GQA does not have (forward K^T
    # and V; backward K^T, V^T, K and the dK, dV stores); the time stays that of MHA.
    make = _bwd if backward else _fwd
    mha, gqa = lower_op(make(1, 8, 256, 128)), lower_op(make(1, 8, 256, 128, kv_heads=2))
    assert not (mha.extrapolated or gqa.extrapolated or gqa.estimated)
    assert mha.hbm_bytes - gqa.hbm_bytes == pytest.approx(kv_loads * 6 * 256 * 128 * 2, rel=1e-6)
    assert gqa.flops == mha.flops
    assert 0.95 * mha.total_ns < gqa.total_ns < 1.02 * mha.total_ns, (gqa.total_ns, mha.total_ns)


def test_gqa_head_counts_must_divide():
    with pytest.raises(LoweringError, match="8 query heads and K/V of 3/3 heads"):
        lower_op(_fwd(1, 8, 128, 64, kv_heads=3))


@pytest.mark.parametrize("D, Ev", [(128, 64), (64, 128), (64, 64)])
def test_value_head_size_may_differ_from_the_query_and_key_head_size(D, Ev):
    # F.scaled_dot_product_attention takes V of its own head size Ev (out, dO and dV have it):
    # P V and dO V^T work over Ev columns. Every element moves exactly as often as the rule
    # loads it: forward q, k, v, out and the FP32 logsumexp once; backward Q, dO, K twice
    # (transposed for the scores, as rows for the products), O, V^T once, dQ, dK, dV stored.
    B, H, S = 1, 2, 256
    q, k = TensorSpec((B, H, S, D), "bfloat16"), TensorSpec((B, H, S, D), "bfloat16")
    v = o = TensorSpec((B, H, S, Ev), "bfloat16")
    lse = TensorSpec((B, H, S), "float32")
    fwd = lower_op(OpSpec(FWD, (q, k, v, 0.0, False, None, None), (o, lse)))
    bwd = lower_op(OpSpec(BWD, (o, q, k, v, o, lse, 0.0, False, None, None), (q, k, v)))
    rows = B * H * S
    assert not (fwd.estimated or fwd.extrapolated or bwd.estimated or bwd.extrapolated)
    assert fwd.hbm_bytes == rows * (2 * D + 2 * Ev) * 2 + rows * 4
    assert bwd.hbm_bytes == rows * ((4 * D + 4 * Ev) + (2 * D + Ev)) * 2 + rows * 4


@pytest.mark.parametrize("causal", [False, True])
def test_every_form_of_the_op_reads_its_own_schema(causal):
    # torch.compile's graphs on the device hold the PrivateUse1 ("overrideable") forms, CUDA's
    # flash form another order: each times what the CPU form (eager's) times for the same call.
    # (The overrideable backward fell back to the roofline; its forward read dropout_p as
    # is_causal.)
    q = TensorSpec((1, 2, 1024, 64), "bfloat16")
    lse = TensorSpec((1, 2, 1024), "float32")
    forward = {
        FWD: (q, q, q, 0.0, causal, None, None),
        "aten::_scaled_dot_product_flash_attention": (q, q, q, 0.0, causal, False, None),
        "aten::_scaled_dot_product_fused_attention_overrideable":
            (q, q, q, None, 0.0, causal, False, None)}
    backward = {
        BWD: (q, q, q, q, q, lse, 0.0, causal, None, None),
        "aten::_scaled_dot_product_flash_attention_backward":
            (q, q, q, q, q, lse, None, None, 1024, 1024, 0.0, causal, None, None, None),
        "aten::_scaled_dot_product_fused_attention_overrideable_backward":
            (q, q, q, q, None, (True, True, True, False), q, lse, None, None, 1024, 1024, 0.0,
             causal, None, None, None)}
    for forms, outs in ((forward, (q, lse)), (backward, (q, q, q))):
        times = {name: lower_op(OpSpec(name, args, outs)) for name, args in forms.items()}
        assert not any(t.estimated for t in times.values())
        assert len({t.total_ns for t in times.values()}) == 1, times
    assert (lower_op(OpSpec(FWD, forward[FWD], (q, lse))).total_ns
            < lower_op(OpSpec(FWD, (q, q, q, 0.0, False, None, None), (q, lse))).total_ns) == causal
