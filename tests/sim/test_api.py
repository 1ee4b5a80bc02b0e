"""The API the device backend calls: simulate -> Result, roofline_ns, Program.from_columns."""

import numpy as np
import pytest

import neuron_sim as ns
from neuron_sim.engines import Engine, Kind


def _small():
    b = ns.ProgramBuilder("trn2")
    A = b.hbm("A", (128, 512), "bfloat16")
    a = b.sbuf("a", (128, 512), "bfloat16")
    s = b.sbuf("s", (128, 128), "bfloat16")
    acc = b.psum("acc", (128, 512))
    b.dma_copy(a, A)
    b.memset(s, 0.0)
    b.nc_matmul(acc, s, a)
    o = b.sbuf("o", (128, 512), "bfloat16")
    b.tensor_copy(o, acc)
    b.dma_copy(A, o)
    return b.build()


def test_simulate_result_fields():
    r = ns.simulate(_small(), "trn2")
    assert r.total_ns > 0 and r.total_ns == r.end_ns.max()
    s = r.summary
    for key in ("total_ns", "engine_active_ns", "engine_active_percent", "hfu", "mfu", "mbu",
                "dma_bytes", "instruction_counts"):
        assert key in s
    assert s["dma_bytes"]["hbm->sbuf"] == 128 * 512 * 2 == s["dma_bytes"]["sbuf->hbm"]
    assert 0 < s["hfu"] < 1
    recs = r.records()
    assert len(recs) == len(r.program) and {"name", "stream", "start_ns", "end_ns"} <= set(recs[0])
    assert r.timeline(Engine.TENSOR).shape[1] == 3
    assert r.to_chrome_trace()["traceEvents"]


def test_simulate_refuses_another_chip():
    with pytest.raises(ns.ProgramError):
        ns.simulate(_small(), "trn3")


def test_roofline():
    c = ns.get_chip("trn2")
    flops = 2 * 4096 ** 3
    assert ns.roofline_ns(flops, 0, "bfloat16", "trn2") == pytest.approx(
        flops / c.tensor_peak_flops() * 1e9)
    assert ns.roofline_ns(0, 1e9, "bfloat16", c) == pytest.approx(1e9 / c.hbm_bytes_per_s_per_core * 1e9)
    assert ns.roofline_ns(flops, 0, "bfloat16", c, lnc=2) == pytest.approx(
        ns.roofline_ns(flops, 0, "bfloat16", c) / 2)


def test_from_columns_bulk_program():
    n = 10_000
    eng = np.tile(np.array([1, 2, 3], np.int8), n // 3 + 1)[:n]
    p = ns.Program.from_columns(ns.get_chip("trn2"), engine=eng, ii_ns=np.full(n, 100.0))
    r = ns.simulate(p)
    assert r.total_ns == pytest.approx(100.0 * (n // 3 + 1))


@pytest.mark.parametrize("kind, engine, home", [
    (Kind.MULTIPLY_MOVING, Engine.VECTOR, "TensorE"),
    (Kind.LOAD_STATIONARY, Engine.SCALAR, "TensorE"),
    (Kind.DMA, Engine.GPSIMD, "DMA"),
])
def test_from_columns_rejects_a_kind_on_an_engine_that_cannot_run_it(kind, engine, home):
    """The timing kernels keep TensorE's stationary buffer and throttle for TensorE rows only:
    a MultiplyMoving given to VectorE would be timed as neither."""
    eng = np.array([0, int(engine), 0], np.int8)
    kinds = np.array([0, int(kind), 0], np.int8)
    with pytest.raises(ns.ProgramError, match=rf"instruction 1 is a {kind.name} on .*runs on "
                                              rf"{home} only \(1 such rows\); put it on {home}"):
        ns.Program.from_columns(ns.get_chip("trn2"), engine=eng, kind=kinds,
                                ii_ns=np.full(3, 100.0))


@pytest.mark.parametrize("p_stride, offset", [(66, 0), (64, -1)], ids=["past_the_end", "before"])
def test_execute_refuses_an_access_outside_its_tensor(p_stride, offset):
    """ns.execute runs a program's semantics on strided NumPy views: an access pattern reaching
    outside its tensor is a ProgramError naming the tensor, not a write over other memory. The
    builder refuses such a pattern first (tests/sim/test_ap_inside.py); here it is put in a
    built program's record afterwards."""
    import dataclasses
    from neuron_sim.program.ap import AccessPattern
    b = ns.ProgramBuilder("trn2")
    x, o = b.hbm("x", (128, 64), "float32"), b.hbm("o", (128, 64), "float32")
    t = b.sbuf("t", (128, 64), "float32")
    b.dma_copy(t, x)
    outside = AccessPattern(o, 0, 128, offset, ((64, 1),), p_stride)
    with pytest.raises(ns.ProgramError, match="outside its tensor 'o'"):
        b.dma_copy(outside, t)
    b.dma_copy(o, t)
    program = b.build()
    program.emits[1] = dataclasses.replace(program.emits[1], writes=(outside,))
    with pytest.raises(ns.ProgramError, match="an access of 'o' reaches its element .* outside "
                                              "its 8192 elements"):
        ns.execute(program, {"x": np.ones((128, 64), np.float32)})
