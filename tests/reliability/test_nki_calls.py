"""NKI kernels called with neuron tensors: only tensors the kernel wrote get the result back
(autograd and requires-grad leaves keep working), 64-bit dtypes come back as the caller's,
tensors on CPU or another core are refused, and an output the kernel never wrote is reported
per NKI_SIM_ON_UNINITIALIZED."""

import warnings

import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim.nki.errors import NkiLaunchError, NkiUninitializedReadError, NkiUninitializedReadWarning


def _twice(h):
    """An SBUF tile of 2*h: the body both kernels below share (a plain function they call)."""
    x = nl.ndarray(h.shape, dtype=h.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=h)
    y = nl.ndarray(h.shape, dtype=h.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=y, data1=x, data2=x, op=nl.add)
    return y


@nki.jit
def double(h):
    """Reads h, returns 2*h: never writes its input."""
    out = nl.ndarray(h.shape, dtype=h.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=_twice(h))
    return out


@nki.jit
def double_in_place(h):
    """Legacy style: writes its result into its argument."""
    nisa.dma_copy(dst=h, src=_twice(h))


@nki.jit
def copy(h):
    out = nl.ndarray(h.shape, dtype=h.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(h.shape, dtype=h.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=h)
    nisa.dma_copy(dst=out, src=x)
    return out


@nki.jit
def forgets_output(h):
    result = nl.ndarray(h.shape, dtype=h.dtype, buffer=nl.shared_hbm, name="result")
    return result


def test_a_read_only_input_keeps_autograd_working():
    x = torch.randn(128, 64, device="neuron", requires_grad=True)
    h = x.tanh()                               # tanh's backward reads h: an in-place write breaks it
    out = double(h)
    torch.testing.assert_close(out.cpu(), 2 * h.detach().cpu())
    h.sum().backward()                         # raised "modified by an inplace operation" before
    torch.testing.assert_close(x.grad.cpu(), 1 - x.detach().cpu().tanh() ** 2)


def test_a_requires_grad_leaf_can_be_read():
    w = torch.randn(128, 64, device="neuron", requires_grad=True)
    before = w._version
    out = double(w)                            # raised "a leaf Variable that requires grad" before
    torch.testing.assert_close(out.cpu(), 2 * w.detach().cpu())
    assert w._version == before


def test_an_input_the_kernel_writes_gets_the_result():
    h = torch.randn(128, 64, device="neuron")
    expected = 2 * h.cpu()
    double_in_place(h)
    torch.testing.assert_close(h.cpu(), expected)


@pytest.mark.parametrize("dtype,values", [
    (torch.int64, [[1, -7, 123456]]),
    (torch.float64, [[0.5, -2.25, 3.0]]),
])
def test_64_bit_outputs_keep_the_callers_dtype(dtype, values):
    h = torch.tensor(values, dtype=dtype).expand(128, 3).contiguous()
    for device in ("neuron", "cpu"):
        out = copy(h.to(device))
        assert out.dtype == dtype and out.device.type == device
        torch.testing.assert_close(out.cpu(), h)


def test_tensors_on_cpu_or_another_core_are_refused():
    a = torch.randn(128, 64, device="neuron:0")
    with pytest.raises(NkiLaunchError, match=r"argument 1 is on cpu but other tensor arguments are on neuron:0"):
        nki.jit(_add2)(a, torch.randn(128, 64))
    with pytest.raises(NkiLaunchError, match=r"argument 1 is on neuron:1 .* on neuron:0"):
        nki.jit(_add2)(a, torch.randn(128, 64, device="neuron:1"))


def _add2(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
    nisa.dma_copy(dst=out, src=x)
    return out


def test_an_output_never_written_is_reported(monkeypatch):
    h = torch.randn(128, 64, device="neuron")
    monkeypatch.delenv("NKI_SIM_ON_UNINITIALIZED", raising=False)
    with pytest.raises(NkiUninitializedReadError, match=r"forgets_output.*result\[128, 64\].*never written"):
        forgets_output(h)
    monkeypatch.setenv("NKI_SIM_ON_UNINITIALIZED", "warn")
    with pytest.warns(NkiUninitializedReadWarning, match=r"result\[128, 64\]"):
        out = forgets_output(h)
    assert out.cpu().isnan().all()
    monkeypatch.setenv("NKI_SIM_ON_UNINITIALIZED", "ignore")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert forgets_output(h).cpu().isnan().all()
