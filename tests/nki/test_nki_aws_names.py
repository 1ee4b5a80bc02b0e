"""AWS's other names for NKI: the legacy `neuronxcc.nki` import path most published kernels use,
and `nki.execute(kernel, *args)` of the current NKI API."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def test_neuronxcc_names_are_the_nki_package():
    from neuronxcc import nki as legacy
    import neuronxcc.nki.isa as legacy_isa
    import neuronxcc.nki.language as legacy_nl
    import neuronxcc.nki.typing as nt
    from neuronxcc.nki import baremetal, benchmark, simulate_kernel  # noqa: F401
    from neuronxcc.nki.language import par_dim  # noqa: F401
    from neuronxcc.nki.typing import tensor

    assert legacy.jit is nki.jit and legacy_nl is nl and legacy_isa is nisa
    assert legacy_nl.float32 is nl.float32 and legacy_nl.tile_size is nl.tile_size
    assert nt.tensor[[128, 512], nl.float32] is tensor     # annotations only


def test_legacy_kernel_runs_unchanged():
    import neuronxcc.nki as lnki
    import neuronxcc.nki.language as lnl
    from neuronxcc.nki.typing import tensor

    @lnki.jit
    def scale_rows(a: tensor, s: tensor):
        out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
        ix = lnl.arange(128)[:, None]
        iy = lnl.arange(a.shape[1])[None, :]
        t = lnl.load(a[ix, iy])
        f = lnl.load(s[ix, lnl.arange(1)[None, :]])
        lnl.store(out[ix, iy], value=lnl.multiply(t, f))
        return out

    a = np.random.rand(128, 64).astype(np.float32)
    s = np.random.rand(128, 1).astype(np.float32)
    np.testing.assert_allclose(lnki.simulate_kernel(scale_rows, a, s), a * s, rtol=1e-6)


@nki.jit
def _double(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_execute_runs_a_kernel_or_a_plain_function_once():
    x = np.random.rand(128, 32).astype(np.float32)
    np.testing.assert_allclose(nki.execute(_double, x), 2 * x)
    rep = nki.last_report()
    assert rep is not None and rep.total_ns > 0          # the simulated time of that run

    def plain(x):                                        # no @nki.jit: execute specialises it
        return _double.func(x)

    np.testing.assert_allclose(nki.execute(plain, x), 2 * x)
    np.testing.assert_allclose(nki.execute(plain, x * 3), 6 * x, rtol=1e-6)


def test_execute_rejects_what_is_not_a_kernel():
    with pytest.raises(TypeError, match="nki.execute: kernel must be an @nki.jit kernel or a function, got int"):
        nki.execute(3, np.zeros((1, 1), np.float32))
