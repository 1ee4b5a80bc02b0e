"""64-bit values survive storage and copies; only ops compute in 32 bits, and say so once.

TorchNeuron computes float64/int64 ops in float32/int32 and returns the original dtype; the
bytes themselves (host<->device copies, device-to-device copies, views, clone, random integer
generation, serialization) keep every bit. A computed value that does not fit in 32 bits
raises one warning per op and dtype naming the op, the dtype and the 32-bit compute.
"""

import inspect
import io
import json
import warnings

import pytest
import torch
from subprocess_run import run_script

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


# The warning is once per op and dtype in a process, and other tests (the OpInfo sweep) may
# already have computed these ops in 64 bits: the two tests of the warning itself start fresh.
WARNINGS_IN_FRESH_PROCESS = f"""
import json, warnings, torch
BIG = {BIG}
{inspect.getsource(_neuron_warnings)}
x = torch.tensor([BIG], device="neuron")
y, first = _neuron_warnings(lambda: (x * 3).cpu())
_, again = _neuron_warnings(lambda: (x * 3).cpu())
h = torch.tensor([1.0, 2.0], dtype=torch.float64, device="neuron")
d, div = _neuron_warnings(lambda: (h / 3).cpu())
print(json.dumps({{"mul": y.tolist(), "first": first, "again": again,
                  "div_dtype": str(d.dtype), "div": d.tolist(), "div_warnings": div}}))
"""


@pytest.fixture(scope="module")
def fresh_warnings():
    proc = run_script(WARNINGS_IN_FRESH_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_int64_compute_wraps_like_int32_and_warns_once(fresh_warnings):
    assert fresh_warnings["mul"] == [torch.tensor([BIG * 3]).to(torch.int32).item()]  # int32 wrap
    assert len(fresh_warnings["first"]) == 1
    m = fresh_warnings["first"][0]
    assert "aten::mul" in m and "torch.int64" in m and "32 bits" in m and "Trainium" in m
    assert fresh_warnings["again"] == []  # once per op and dtype


def test_float64_compute_rounds_to_float32_and_warns(fresh_warnings):
    assert fresh_warnings["div_dtype"] == "torch.float64"
    assert fresh_warnings["div"] == (torch.tensor([1.0, 2.0]) / 3).double().tolist()
    assert any("aten::div" in m and "torch.float64" in m and "float32" in m
               for m in fresh_warnings["div_warnings"])


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
