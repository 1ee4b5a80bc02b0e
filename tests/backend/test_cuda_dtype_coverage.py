"""Ops CUDA runs for more dtypes than their CPU kernel does behave on 'neuron' as on CUDA.

The class is recomputed from PyTorch's OpInfo database (dtypesIfCUDA minus the CPU dtypes,
kept where the CPU kernel raises "not implemented for"), so a pair added by a later torch
fails `test_class_is_the_known_one` until it is handled in aten/DtypeWidening.cpp or listed
below with the reason it is not. Hugging Face MoE routing is the case that matters most:
`torch.histc` over integer expert ids.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db

# Handled by computing in a dtype the CPU kernel has (aten/DtypeWidening.cpp).
WIDENED = {
    ("histc", "int8"), ("histc", "int16"), ("histc", "int32"), ("histc", "int64"),
    ("histc", "uint8"),
    ("abs", "bool"), ("nn.functional.softsign", "bool"), ("trace", "bool"),
    ("nn.functional.avg_pool3d", "float16"), ("nn.functional.avg_pool3d", "bfloat16"),
    ("_upsample_bilinear2d_aa", "float16"), ("_upsample_bilinear2d_aa", "bfloat16"),
    ("nn.functional.multi_margin_loss", "float16"),
    ("nn.functional.multi_margin_loss", "bfloat16"),
    ("nn.functional.multilabel_margin_loss", "float16"),
    ("nn.functional.multilabel_margin_loss", "bfloat16"),
    ("nn.functional.rrelu", "float16"),
}
# Not handled here, with the reason.
ELSEWHERE = {
    ("torch.ops.aten._flash_attention_forward", "float16"): "CUDA-only kernel, no CPU one at all",
    ("torch.ops.aten._efficient_attention_forward", "float16"): "CUDA-only kernel",
    ("torch.ops.aten._efficient_attention_forward", "float32"): "CUDA-only kernel",
}


def _name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def cuda_only_pairs():
    """(op, dtype) pairs OpInfo declares for CUDA whose CPU kernel is not implemented."""
    pairs = set()
    for op in op_db:
        if op.variant_test_name or op.dtypesIfCUDA is None:
            continue
        for dtype in set(op.dtypesIfCUDA) - set(op.dtypes):
            if dtype.is_complex or dtype == torch.float64:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for sample in op.sample_inputs("cpu", dtype):
                        op(sample.input, *sample.args, **sample.kwargs)
            except NotImplementedError:
                pairs.add((op.name, str(dtype).removeprefix("torch.")))
            except RuntimeError:
                pass            # half FFTs: torch.fft's front end admits half only on CUDA
    return pairs


def test_class_is_the_known_one():
    assert cuda_only_pairs() == WIDENED | set(ELSEWHERE)


def _samples(name, dtype):
    op = next(o for o in op_db if o.name == name and not o.variant_test_name)
    return op, list(op.sample_inputs("cpu", dtype))


@pytest.mark.parametrize("name,dtype", sorted(WIDENED - {("nn.functional.rrelu", "float16")}))
def test_opinfo_samples_match_cuda_semantics(name, dtype):
    """Every sample runs on neuron in the dtype and equals the op computed in a wider dtype
    (float for halves, as CUDA accumulates; exact for integers and bools)."""
    dtype = getattr(torch, dtype)
    op, samples = _samples(name, dtype)
    assert samples
    wide = torch.float32 if dtype.is_floating_point else torch.float64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # histc falls back to CPU, with its one warning
        for sample in samples:
            def widen(t):
                return t.to(wide) if isinstance(t, torch.Tensor) and t.dtype == dtype else t
            args = [widen(a) for a in sample.args]
            kwargs = {k: widen(v) for k, v in sample.kwargs.items()}
            if dtype == torch.bool:
                expected = op(sample.input.to(torch.uint8), *args, **kwargs)
                expected = expected.to(torch.bool) if name == "abs" else expected
            else:
                expected = op(widen(sample.input), *args, **kwargs)
            to_n = lambda t: t.to("neuron") if isinstance(t, torch.Tensor) else t  # noqa: E731
            actual = op(to_n(sample.input), *[to_n(a) for a in sample.args],
                        **{k: to_n(v) for k, v in sample.kwargs.items()})
            assert actual.device.type == "neuron"
            if name not in ("trace", "nn.functional.softsign"):
                assert actual.dtype == sample.input.dtype   # as on CUDA: back in the input dtype
            torch.testing.assert_close(actual.cpu(), expected.to(actual.dtype), rtol=1e-2,
                                       atol=1e-2, check_dtype=False)


def cuda_integer_histc(x, bins, lo, hi):
    """CUDA's integer histc: bin = (x - min) * bins / (max - min) in int64, the top edge
    belongs to the last bin, values outside [min, max] are not counted."""
    values = [int(v) for v in x.flatten().tolist()]
    lo, hi = int(lo), int(hi)
    if lo == hi:
        lo, hi = min(values), max(values)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    counts = [0] * bins
    for v in values:
        if lo <= v <= hi:
            counts[min((v - lo) * bins // (hi - lo), bins - 1)] += 1
    return torch.tensor(counts, dtype=x.dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int16])
@pytest.mark.parametrize("bins,lo,hi", [(8, 0, 7), (7, 0, 0), (49, 0, 49), (5, 3, 40), (3, -5, 9)])
def test_integer_histc_equals_cuda_formula(dtype, bins, lo, hi):
    g = torch.Generator().manual_seed(bins)
    low = 0 if dtype == torch.uint8 else -8
    x = torch.randint(low, 60, (500,), generator=g).to(dtype)
    if dtype == torch.uint8 and lo < 0:
        pytest.skip("uint8 has no negative range")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual = torch.histc(x.to("neuron"), bins=bins, min=lo, max=hi)
    assert actual.dtype == dtype and actual.device.type == "neuron"
    assert torch.equal(actual.cpu(), cuda_integer_histc(x, bins, lo, hi))


def test_moe_routing_counts_tokens_per_expert():
    """The call Hugging Face MoE layers make on accelerators (int32 expert ids)."""
    experts = torch.randint(0, 8, (64, 2), generator=torch.Generator().manual_seed(0))
    ids = experts.to(torch.int32).to("neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = torch.histc(ids, bins=8, min=0, max=7)
    assert torch.equal(counts.cpu(), torch.bincount(experts.flatten(), minlength=8).to(torch.int32))


def test_out_and_in_place_variants_write_the_callers_tensor():
    x = torch.tensor([0, 1, 1, 3, 3, 3], dtype=torch.int32)
    out = torch.empty(0, dtype=torch.int32, device="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = torch.histc(x.to("neuron"), bins=4, min=0, max=3, out=out)
    assert result is out and out.tolist() == [1, 2, 0, 3]
    flags = torch.tensor([True, False, True], device="neuron")
    assert flags.abs_() is flags and flags.tolist() == [True, False, True]
    wrong = torch.empty(2, dtype=torch.int32, device="neuron")
    with pytest.raises(RuntimeError, match="has shape"), warnings.catch_warnings():
        warnings.simplefilter("ignore")     # CPU first resizes out= with a deprecation warning
        torch.histc(x.to("neuron"), bins=4, min=0, max=3, out=wrong)


def test_half_backward_matches_float_reference():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 6, 6, 6)
    for fn in (lambda t: F.avg_pool3d(t, 2),
               lambda t: torch.ops.aten._upsample_bilinear2d_aa(t[:, :, 0], [9, 9], False)):
        ref = x.clone().requires_grad_()
        fn(ref).sum().backward()
        xn = x.to(torch.float16).to("neuron").requires_grad_()
        out = fn(xn)
        out.float().sum().backward()
        assert out.dtype == torch.float16 and xn.grad.dtype == torch.float16
        torch.testing.assert_close(out.cpu().float(), fn(x), rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(xn.grad.cpu().float(), ref.grad, rtol=1e-2, atol=1e-2)


def test_rrelu_float16_writes_its_noise():
    torch.manual_seed(0)
    x = torch.randn(64, dtype=torch.float16, device="neuron")
    y = F.rrelu(x, training=True)
    assert y.dtype == torch.float16
    xc, yc = x.cpu().float(), y.cpu().float()
    slope = yc[xc < 0] / xc[xc < 0]
    assert torch.equal(yc[xc >= 0], xc[xc >= 0])
    assert ((slope > 1 / 8 - 1e-3) & (slope < 1 / 3 + 1e-3)).all()
