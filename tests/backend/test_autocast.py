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


def test_profiler_advice_reads_the_registered_lists():
    """The bf16 advice's op lists are the extension's autocast registrations (one list)."""
    import torch_neuronx
    from torch_neuronx.profiling import autocast as advice
    registered = {n for n in torch._C._dispatch_get_all_op_names()
                  if torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastPrivateUse1")}
    policy = dict(torch_neuronx._C._autocast_ops())
    assert set(policy) == registered
    assert policy["aten::mm"] == "lower_precision_fp" and policy["aten::dot"] == "promote"
    assert policy["aten::pow.Tensor_Scalar"] == "fp32"
    assert policy["aten::binary_cross_entropy"] == "banned"

    def listed(*policies):
        return {n.split(".")[0] for n, p in policy.items() if p in policies}
    lower, fp32 = listed("lower_precision_fp"), listed("fp32", "fp32_set_opt_dtype",
                                                       "fp32_append_dtype")
    assert lower <= advice.LOWER and fp32 <= advice.FP32_OPS
    # what the advice adds are the names listed composites reach the device under, none of
    # them registered with another policy (dot: matmul of vectors; _softmax: softmax)
    others = {n.split(".")[0] for n in registered} - lower - fp32
    assert not (advice.LOWER - lower) & others - {"aten::dot"}
    assert not (advice.FP32_OPS - fp32) & others


def test_norm_runs_in_float32_as_on_cuda():
    x = torch.randn(4, 8, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        n = torch.ops.aten.norm.Scalar(x.bfloat16(), 2)
    assert n.dtype == torch.float32
    assert torch.allclose(n.cpu(), x.cpu().bfloat16().float().norm())
