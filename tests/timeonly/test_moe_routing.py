"""MoE models in time-only mode: expert token counts come from the declared routing
assumption (torch_neuronx.set_moe_routing), and timing equals normal execution whenever the
real routing is the assumed one."""

import pytest
import torch

from device_time import device_ns
from torch_neuronx import set_moe_routing, time_only


def _grouped_mm_ns(offs_or_none, timed_only, scaled):
    torch.manual_seed(0)
    with time_only(timed_only):
        a = torch.randn(256, 128, device="neuron", dtype=torch.bfloat16)
        b = torch.randn(4, 256, 128, device="neuron", dtype=torch.bfloat16).transpose(-2, -1)
        offs = torch.tensor(offs_or_none, dtype=torch.int32).to("neuron")
        if scaled:      # FP8 row-wise, as TorchTitan's MoE calls it
            fp8 = torch.float8_e4m3fn
            sa, sb = torch.rand(256, device="neuron"), torch.rand(4 * 256, device="neuron")
            a, b = a.to(fp8), b.to(fp8)

        def grouped_mm():
            if scaled:
                return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)
            return torch._grouped_mm(a, b, offs=offs)
        ns, out = device_ns(grouped_mm)
    assert out.shape == (256, 256)
    return ns


@pytest.mark.parametrize("scaled", [False, True], ids=["bf16", "fp8-scaled"])
@pytest.mark.parametrize("ends,shares", [([64, 128, 192, 256], None),
                                         ([128, 192, 224, 256], [4, 2, 1, 1])],
                         ids=["uniform", "skewed"])
def test_grouped_mm_time_follows_the_routing_assumption(ends, shares, scaled):
    set_moe_routing(shares)
    try:
        assumed = _grouped_mm_ns(ends, timed_only=True, scaled=scaled)
    finally:
        set_moe_routing(None)
    assert assumed == _grouped_mm_ns(ends, timed_only=False, scaled=scaled)


def test_grouped_mm_equals_cpu():
    torch.manual_seed(0)
    a, b = torch.randn(10, 8), torch.randn(3, 8, 8)
    offs = torch.tensor([2, 5, 8], dtype=torch.int32)
    got = torch._grouped_mm(a.to("neuron"), b.to("neuron"), offs=offs.to("neuron")).cpu()
    torch.testing.assert_close(got[:8], torch._grouped_mm(a, b, offs=offs)[:8], rtol=0, atol=0)
    assert got[8:].eq(0).all()                       # rows no group covers



def test_grouped_mm_of_a_2d_operand_needs_offsets():
    """As on CPU: a 2-D operand without offs is refused with torch's message (it was an
    AttributeError unscaled, and an all-zero result scaled)."""
    a = torch.randn(256, 128, device="neuron", dtype=torch.bfloat16)
    b = torch.randn(4, 256, 128, device="neuron", dtype=torch.bfloat16).transpose(-2, -1)
    sa, sb = torch.rand(256, device="neuron"), torch.rand(4 * 256, device="neuron")
    fp8 = torch.float8_e4m3fn
    needs = "Have to provide offsets if there is a 2d matrix"
    with pytest.raises(RuntimeError, match=needs):
        torch._grouped_mm(a, b)
    with pytest.raises(RuntimeError, match=needs):
        torch._scaled_grouped_mm(a.to(fp8), b.to(fp8), sa, sb, out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=needs):
        torch._grouped_mm(a.cpu(), b.cpu())

def test_routing_assumption_is_checked():
    with pytest.raises(ValueError, match="non-negative with a positive sum"):
        set_moe_routing([0, 0])
    set_moe_routing([1, 1, 2])
    try:
        with pytest.raises(ValueError, match="has 3 shares but the model routes to 4 experts"):
            from torch_neuronx.time_only import moe_routing
            moe_routing(4)
    finally:
        set_moe_routing(None)


def test_hugging_face_mixtral_trains_in_time_only_mode():
    from transformers import MixtralConfig, MixtralForCausalLM
    cfg = MixtralConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        num_local_experts=8, num_experts_per_tok=2)
    with time_only():
        model = MixtralForCausalLM(cfg).to("neuron")
        x = torch.randint(0, 512, (2, 64)).to("neuron")
        assert device_ns(lambda: model(input_ids=x, labels=x).loss.backward())[0] > 0
        assert model.model.layers[0].mlp.experts.gate_up_proj.grad is not None
