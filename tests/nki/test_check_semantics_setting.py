"""NEURON_SIM_CHECK_SEMANTICS, the debug setting: every NKI kernel run (nki.simulate, a direct
@nki.jit call, the legacy helpers, a kernel called on neuron tensors) runs its built program
through the ISA modules' NumPy semantics, as ``check_semantics=True`` does for one call. The
nisa calls compute with the same modules, so the tests make the program run wrong on its own:
the interpreter gets a tensor_tensor whose semantics adds one."""

import re
import types

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim import interpreter
from neuron_sim.nki.errors import NkiValidationError

SETTING = "NEURON_SIM_CHECK_SEMANTICS"


@nki.jit(platform_target="trn2")
def _add(a, b):
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    y = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=y, src=b)
    nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    return out


def _inputs():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((128, 64)).astype(np.float32),
            rng.standard_normal((128, 64)).astype(np.float32))


@pytest.fixture
def wrong_program(monkeypatch):
    """The interpreter's tensor_tensor writes its result + 1; returns the names it ran."""
    ran = []
    real = interpreter.module_for

    def module_for(name):
        mod = real(name)
        ran.append(name)
        if name != "tensor_tensor":
            return mod

        def semantics(state, emit):
            mod.semantics(state, emit)
            (dst,) = emit.writes
            state.write(dst, state.read(dst) + 1)
        return types.SimpleNamespace(semantics=semantics)

    monkeypatch.setattr(interpreter, "module_for", module_for)
    return ran


def _error(call):
    """The message, tensor numbers (t4, t9: one counter per process) left out."""
    with pytest.raises(NkiValidationError) as e:
        call()
    return re.sub(r"\bt\d+\[", "t[", str(e.value))


def test_setting_raises_what_check_semantics_raises(wrong_program, monkeypatch):
    a, b = _inputs()
    monkeypatch.delenv(SETTING, raising=False)
    expected = _error(lambda: nki.simulate(_add, check_semantics=True)(a, b))
    assert "check_semantics: the program differs from the traced kernel" in expected
    assert "up to 1 away" in expected
    monkeypatch.setenv(SETTING, "1")
    assert _error(lambda: nki.simulate(_add)(a, b)) == expected
    assert _error(lambda: _add(a, b)) == expected                       # a direct @nki.jit call
    assert _error(lambda: nki.baremetal(_add)(a, b)) == expected
    assert _error(lambda: nki.benchmark(_add)(a, b)) == expected


def test_setting_off_runs_no_check(wrong_program, monkeypatch):
    a, b = _inputs()
    monkeypatch.delenv(SETTING, raising=False)
    np.testing.assert_allclose(nki.simulate(_add)(a, b), a + b, rtol=1e-6)
    np.testing.assert_allclose(_add(a, b), a + b, rtol=1e-6)
    assert wrong_program == []                     # the interpreter never ran
    monkeypatch.setenv(SETTING, "1")               # an explicit option wins over the setting
    np.testing.assert_allclose(nki.simulate(_add, check_semantics=False)(a, b), a + b, rtol=1e-6)
    assert wrong_program == []


def test_setting_on_passes_a_correct_program(monkeypatch):
    a, b = _inputs()
    monkeypatch.setenv(SETTING, "on")
    np.testing.assert_allclose(nki.simulate(_add)(a, b), a + b, rtol=1e-6)
    assert not [f for f in nki.last_report().findings if f.kind == "semantics check"]


def _neuron_available():
    try:
        import torch
        torch.zeros(1, device="neuron")
        return True
    except Exception:       # torch missing or the backend not built in this checkout
        return False


@pytest.mark.skipif(not _neuron_available(), reason="the 'neuron' device backend is not built")
def test_setting_checks_kernels_called_on_neuron_tensors(wrong_program, monkeypatch):
    import torch
    a, b = (torch.from_numpy(x).to("neuron") for x in _inputs())
    monkeypatch.setenv(SETTING, "1")
    assert "the program differs from the traced kernel" in _error(lambda: _add(a, b))
