"""The legacy helpers' options (nki.baremetal, nki.benchmark, nki.profile) and nki.simulate's:
those that mean something here are used, the hardware-only ones documented by AWS (NEFF/NTFF
file names, compiler flags) are taken, and any other is refused by name."""

import numpy as np
import pytest

import nki
import nki.language as nl
from nki_helpers import to_hbm


@nki.jit
def copy_kernel(x):
    return to_hbm(nl.load(x))[0]


X = np.ones((4, 4), np.float32)


def test_baremetal_uses_simulate_options_and_takes_the_hardware_ones(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    bm = nki.baremetal(platform_target="trn1", save_neff_name="k.neff",
                       save_trace_name="k.ntff", additional_compile_opt="-O1")
    np.testing.assert_array_equal(bm(copy_kernel)(X), X)
    assert nki.last_report().target == "trn1"


@pytest.mark.parametrize("make", [
    lambda: nki.baremetal(copy_kernel, numeric=False),
    lambda: nki.baremetal(numeric=False),
    lambda: nki.benchmark(copy_kernel, warmups=3),
    lambda: nki.profile(copy_kernel, working_directory=".", numeric=False),
    lambda: nki.simulate(copy_kernel, numeric=False),
])
def test_an_unknown_option_is_refused_by_name(make):
    with pytest.raises(nki.NkiLaunchError, match="unknown option '(numeric|warmups)'"):
        make()


def test_benchmark_reports_one_latency_whatever_warmup_and_iters():
    bench = nki.benchmark(copy_kernel, warmup=0, iters=3, save_neff_name="k.neff")
    bench(X)
    lat = bench.benchmark_result.nc_latency
    assert 0 < lat.get_latency_percentile(1) == lat.get_latency_percentile(99) \
        == pytest.approx(nki.last_report().total_ns / 1e3)
