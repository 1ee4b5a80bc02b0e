"""64-bit values survive storage and copies; only ops compute in 32 bits, and say so once.

TorchNeuron computes float64/int64 ops in float32/int32 and returns the original dtype; the
bytes themselves (host<->device copies, device-to-device copies, views, clone, random integer
generation, serialization) keep every bit. A computed value that does not fit in 32 bits
raises one warning per op and dtype naming the op, the dtype and the 32-bit compute.
"""

import io
import warnings

import pytest
import torch

BIG = 2**40 + 5


def _neuron_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught if "[Neuron]" in str(w.message)]


def test_issue_repro_int64_round_trip_is_exact():
    assert torch.tensor([BIG]).to("neuron").cpu().tolist() == [BIG]


def test_issue_repro_randint_above_int32_is_in_range():
    torch.manual_seed(0)
    r = torch.randint(0, 2**40, (1000,), device="neuron").cpu()
    assert r.dtype == torch.int64
    assert r.min().item() >= 0 and r.max().item() < 2**40
    assert r.max().item() > 2**32  # values really use the upper bits


def test_issue_repro_float64_round_trip_is_exact():
    x = torch.tensor([1 + 1e-10, 2.0**-1070, 1e300], dtype=torch.float64)
    assert torch.equal(x.to("neuron").cpu(), x)


@pytest.mark.parametrize("dtype,values", [
    (torch.int64, [BIG, -BIG, 2**62 + 1, -(2**63)]),
    (torch.float64, [1 + 1e-10, 1e300, -1e-300, 3.141592653589793]),
])
def test_copies_views_and_clone_keep_every_bit(dtype, values):
    cpu = torch.tensor(values, dtype=dtype)
    x = cpu.to("neuron")
    assert torch.equal(x.cpu(), cpu)
    assert torch.equal(x.clone().cpu(), cpu)
    assert torch.equal(x[1:3].cpu(), cpu[1:3])                      # view
    assert torch.equal(x.flip(0).contiguous().cpu(), cpu.flip(0))   # data movement op
    assert torch.equal(x.to("neuron:1").cpu(), cpu)                 # device to device
    assert torch.equal(torch.cat([x, x]).cpu(), torch.cat([cpu, cpu]))
    y = torch.empty_like(x)
    y.copy_(x)
    assert torch.equal(y.cpu(), cpu)
    assert x[0].item() == values[0]


def test_serialization_keeps_64_bit_values():
    x = torch.tensor([BIG, -BIG], device="neuron")
    buf = io.BytesIO()
    torch.save({"x": x, "f": torch.tensor([1 + 1e-10], dtype=torch.float64, device="neuron")}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="neuron")
    assert loaded["x"].device.type == "neuron"
    assert loaded["x"].cpu().tolist() == [BIG, -BIG]
    assert loaded["f"].cpu().item() == 1 + 1e-10


def test_int64_compute_wraps_like_int32_and_warns_once():
    x = torch.tensor([BIG], device="neuron")
    y, messages = _neuron_warnings(lambda: (x * 3).cpu())
    assert y.tolist() == [torch.tensor([BIG * 3]).to(torch.int32).item()]  # int32 wrap-around
    assert len(messages) == 1
    m = messages[0]
    assert "aten::mul" in m and "torch.int64" in m and "32 bits" in m and "Trainium" in m
    _, again = _neuron_warnings(lambda: (x * 3).cpu())
    assert again == []  # once per op and dtype


def test_float64_compute_rounds_to_float32_and_warns():
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, device="neuron")
    y, messages = _neuron_warnings(lambda: (x / 3).cpu())
    assert y.dtype == torch.float64
    assert y.tolist() == (torch.tensor([1.0, 2.0]) / 3).double().tolist()
    assert any("aten::div" in m and "torch.float64" in m and "float32" in m for m in messages)


def test_values_that_fit_do_not_warn():
    x = torch.arange(10, device="neuron")
    s, messages = _neuron_warnings(lambda: (x * 2).sum().item())
    assert s == 90
    h = torch.tensor([0.5, 0.25], dtype=torch.float64, device="neuron")
    _, more = _neuron_warnings(lambda: (h * 2).cpu())
    assert messages == [] and more == []


def test_compiled_graphs_follow_the_same_policy():
    x = torch.tensor([BIG, 7], device="neuron")
    f = torch.compile(lambda t: (t.clone(), t * 3, t[1:] + 1), backend="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copied, product, shifted = f(x)
    assert copied.cpu().tolist() == [BIG, 7]                                   # moved: exact
    assert product.cpu().tolist() == torch.tensor([BIG * 3, 21]).to(torch.int32).tolist()
    assert shifted.cpu().tolist() == [8]
