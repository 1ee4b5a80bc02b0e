"""The program builder's two ways of finding dependencies give the same program: the bulk pass
over the recorded boxes (neuron_sim/kernels/deps.py, the default) and the per-instruction
reference (`ProgramBuilder._auto`, NEURON_SIM_REFERENCE=1). Same columns, dependencies and
same-stream order edges, on calibration programs, NKI kernels, spills, semaphores and explicit
dependencies."""

import numpy as np
import pytest

from neuron_sim.calibrate import mamba
from neuron_sim.calibrate import programs as P
from neuron_sim.errors import DeadlockError, ProgramError
from neuron_sim.nki.launch import last_report, simulate as nki_simulate
from neuron_sim.program import ProgramBuilder
from neuron_sim.program import builder as B


def _equal(a, b):
    assert len(a) == len(b) and a.opnames == b.opnames
    for k in a.cols:
        assert a.cols[k].dtype == b.cols[k].dtype, k
        np.testing.assert_array_equal(a.cols[k], b.cols[k], err_msg=k)
    np.testing.assert_array_equal(a.dep_ptr, b.dep_ptr)
    np.testing.assert_array_equal(a.dep_idx, b.dep_idx)
    for x, y in zip(a.order_edges(), b.order_edges()):
        np.testing.assert_array_equal(x, y)


def _both(make, monkeypatch):
    monkeypatch.setattr(B, "_reference_default", lambda: False)
    fast = make()
    monkeypatch.setattr(B, "_reference_default", lambda: True)
    ref = make()
    return fast, ref


PROGRAMS = {
    "C1 tiled": lambda: P.matmul_tiled("trn1", M=256, K=2048, N=2048),
    "C2 hoist": lambda: P.matmul_hoist_load("trn1", M=256, K=2048, N=2048),
    "C3 block free": lambda: P.matmul_block_free("trn1", M=512, K=2048, N=2048),
    "C4 fully blocked": lambda: P.matmul_fully_blocked("trn1", M=2048, K=2048, N=1024),
    "C8 with spills": lambda: P.matmul_fully_blocked("trn2", M=4096, K=1024, N=1024,
                                                     dtype="float32"),
    "C17": P.scalar_dependent_chain, "C18": P.hwdge_stream, "C19": P.tensor_burst_after_idle,
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_bulk_deps_equal_reference_on_calibration_programs(name, monkeypatch):
    fast, ref = _both(PROGRAMS[name], monkeypatch)
    # C18, C19: one queue each, so only same-stream order edges (C19) or nothing (C18)
    assert fast.dep_idx.size + fast.order_edges()[1].size > 0 or name == "C18"
    _equal(fast, ref)


def test_c8_program_spills():
    # the "C8 with spills" case above really exercises spill stores and reloads
    prog = PROGRAMS["C8 with spills"]()
    assert any(e is not None and "spill" in e.params for e in prog.emits)


@pytest.mark.parametrize("version,channels,seq", [("v1", 256, 512), ("v2", 256, 1024),
                                                  ("v3", 256, 1024)])
def test_bulk_deps_equal_reference_on_nki_kernels(version, channels, seq, monkeypatch):
    def make():
        nki_simulate(mamba.KERNELS[version], platform_target="trn1", numerics=False)(
            *mamba.inputs(channels, seq))
        rep = last_report()
        return rep.programs[0], rep.total_ms
    (fast, fast_ms), (ref, ref_ms) = _both(make, monkeypatch)
    _equal(fast, ref)
    assert fast_ms == ref_ms


def _semaphores_and_explicit(chip="trn2"):
    b = ProgramBuilder(chip)
    x = b.sbuf("x", (128, 512), "float32")
    y = b.sbuf("y", (128, 512), "float32")
    h = b.hbm("h", (128, 512), "float32")
    a = b.memset(x, 1.0, signal=3)
    b.memset(y[:, 0:256], 0.0, engine="gpsimd")
    b.tensor_copy(y[:, 256:512], x, engine="scalar", wait=[(3, 1)])
    b.nop("sync", deps=[a], wait=[(3, 1)])
    b.dma_copy(h, y, deps=[0, 1])
    b.tensor_tensor(x, x, y, "add")           # WAR on x after the scalar copy read it
    b.memset(y, 2.0)                          # WAR/WAW on y, same stream as the add: order edge
    return b.build()


def test_bulk_deps_equal_reference_with_semaphores_and_explicit_deps(monkeypatch):
    fast, ref = _both(_semaphores_and_explicit, monkeypatch)
    _equal(fast, ref)
    assert list(fast.deps_of(2)) == [0]                 # RAW on x, and the semaphore
    assert list(fast.deps_of(4)) == [0, 1, 2]
    assert fast.order_edges()[1].size > 0


@pytest.mark.parametrize("reference", [False, True])
def test_bad_explicit_dependency_and_deadlock_raise_in_both_modes(reference):
    b = ProgramBuilder("trn2", reference=reference)
    x = b.sbuf("x", (128, 64), "float32")
    with pytest.raises(ProgramError, match="dependency 5 is not an earlier instruction"):
        b.memset(x, 0.0, deps=[5])
    b = ProgramBuilder("trn2", reference=reference)
    x = b.sbuf("x", (128, 64), "float32")
    b.memset(x, 0.0, wait=[(1, 1)])
    with pytest.raises(DeadlockError, match="waits for semaphore 1 >= 1"):
        b.build()


def test_paused_gc_nests_across_threads_and_restores_the_collector():
    import gc
    import threading
    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()

    def other():                                  # a second program tracing at the same time
        with B.paused_gc():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=other)
    with B.paused_gc():
        t.start()
        inside.wait(5)
        with B.paused_gc():
            assert not gc.isenabled()
    assert not gc.isenabled()                     # the other thread still holds the pause
    leave.set()
    t.join()
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with B.paused_gc():
            raise ValueError("an error inside still restores the collector")
    assert gc.isenabled()
