"""The numba timing kernel against its Python reference, and the model's documented behaviours."""

import numpy as np
import pytest

import neuron_sim as ns
from neuron_sim.engines import Engine, Kind
from neuron_sim.program import Program


def random_program(chip, n, seed):
    """A random mix of every kind of row, with random backward dependencies."""
    rng = np.random.default_rng(seed)
    c = ns.get_chip(chip)
    engine = rng.choice([0, 0, 1, 2, 3, 4, 5, 5], size=n).astype(np.int8)
    kind = np.where(engine == Engine.DMA, Kind.DMA, Kind.GENERIC)
    pe = engine == Engine.TENSOR
    kind[pe] = np.where(rng.random(pe.sum()) < 0.4, Kind.LOAD_STATIONARY, Kind.MULTIPLY_MOVING)
    ii = rng.uniform(10, 900, n)
    lat = rng.uniform(0, 200, n)
    ndeps = rng.integers(0, 3, n)
    ndeps[0] = 0
    ptr = np.concatenate([[0], np.cumsum(ndeps)])
    idx = np.concatenate([rng.integers(0, max(i, 1), k) for i, k in enumerate(ndeps)] or [[]])
    dma = engine == Engine.DMA
    return Program.from_columns(
        c, engine=engine, ii_ns=ii, lat_ns=lat, kind=kind, deps=(ptr, idx.astype(np.int64)),
        dma_queue=rng.integers(0, 16, n), dma_engine_ns=np.where(dma, rng.uniform(20, 2000, n), 0),
        dma_hbm_ns=np.where(dma, rng.uniform(0, 1500, n), 0),
        dma_issue_ns=np.where(dma, rng.choice([50.0, 600.0], n), 0),
        dma_engines=np.where(dma, rng.integers(1, 17, n), 0),
        dma_engine0=rng.integers(0, 16, n), dma_bytes=np.where(dma, 4096.0, 0))


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_matches_reference_on_random_programs(chip, seed):
    prog = random_program(chip, 3000, seed)
    fast = ns.simulate(prog)
    slow = ns.simulate(prog, reference=True)
    for a, b in ((fast.start_ns, slow.start_ns), (fast.end_ns, slow.end_ns),
                 (fast.data_start_ns, slow.data_start_ns), (fast.busy_ns, slow.busy_ns)):
        np.testing.assert_array_equal(a, b)


def test_kernel_matches_reference_on_a_built_kernel():
    from neuron_sim.calibrate import programs as P
    prog = P.matmul_fully_blocked("trn1", M=1024, K=2048, N=2048, tiles_m=4, tiles_k=4)
    np.testing.assert_array_equal(ns.simulate(prog).end_ns,
                                  ns.simulate(prog, reference=True).end_ns)


def test_deterministic():
    prog = random_program("trn2", 2000, 7)
    a, b = ns.simulate(prog), ns.simulate(prog)
    assert a.total_ns == b.total_ns and a.records(50) == b.records(50)


def _matmuls(chip, n, gap_ns=0.0):
    b = ns.ProgramBuilder(chip)
    st = [b.sbuf(f"st{i}", (128, 128), "bfloat16") for i in range(2)]
    mv = b.sbuf("mv", (128, 512), "bfloat16")
    acc = [b.psum(f"a{i}", (128, 512)) for i in range(8)]
    for i in range(n):
        b.nc_matmul(acc[i % 8], st[i % 2], mv)
    return b.build()


def test_back_to_back_matmuls_run_at_the_documented_rate():
    # Trn1 has no dI/dt throttle: 64 matmuls of N=512 take 64 x 512 cycles at 2.8 GHz (plus the
    # first LoadStationary and the last MultiplyMoving's latency); background LS is hidden.
    c = ns.get_chip("trn1")
    r = ns.simulate(_matmuls("trn1", 64))
    mm_ns = 512 / c.tensor_clock_hz * 1e9
    lat = c.tensor_mm_latency_extra_cycles / c.tensor_clock_hz * 1e9
    ls = 32 / c.tensor_clock_hz * 1e9
    assert r.total_ns == pytest.approx(ls + 64 * mm_ns + lat)
    assert r.engine_busy_ns["TensorE"] == pytest.approx(64 * mm_ns)


def test_throttle_halves_the_first_matmul_then_ramps():
    r = ns.simulate(_matmuls("trn2", 64))
    mm = np.nonzero(r.program.cols["kind"] == Kind.MULTIPLY_MOVING)[0]
    ii = r.program.cols["ii_ns"][mm]
    assert r.busy_ns[mm[0]] == pytest.approx(2 * ii[0])
    assert r.busy_ns[mm[-1]] == pytest.approx(ii[-1])
    assert np.all(np.diff(r.busy_ns[mm][:10]) < 0)


def test_cross_engine_dependency_pays_semaphore_latency():
    c = ns.get_chip("trn2")
    b = ns.ProgramBuilder(c)
    t = b.sbuf("t", (128, 64), "float32")
    u = b.sbuf("u", (128, 64), "float32")
    b.memset(t, 1.0)                       # VectorE
    b.activation(u, t, "exp")              # ScalarE reads t
    r = ns.simulate(b.build())
    expect = r.end_ns[0] + c.cross_engine_semaphore_latency_s * 1e9
    assert r.start_ns[1] == pytest.approx(expect)


def test_dma_shares_hbm_bandwidth():
    c = ns.get_chip("trn2")
    b = ns.ProgramBuilder(c)
    h = b.hbm("h", (128, 8 * 4096), "float32")
    s = [b.sbuf(f"s{i}", (128, 4096), "float32") for i in range(8)]
    for i in range(8):
        b.dma_copy(s[i], h[:, i * 4096:(i + 1) * 4096])
    r = ns.simulate(b.build())
    nbytes = 8 * 128 * 4096 * 4
    hbm_bound = nbytes / c.hbm_bytes_per_s_per_core * 1e9
    assert r.total_ns >= hbm_bound
    assert r.total_ns == pytest.approx(hbm_bound + c.dma_fixed_latency_s * 1e9, rel=0.05)
    assert r.summary["dma_bytes"]["hbm->sbuf"] == nbytes


def test_union_length_kernel_matches_python():
    from neuron_sim.kernels.timing import _union_length
    rng = np.random.default_rng(9)
    s = rng.uniform(0, 1000, 500)
    e = s + rng.uniform(0, 50, 500)
    covered, cur_s, cur_e = 0.0, None, None
    for a, b in sorted(zip(s, e)):
        if cur_e is None or a > cur_e:
            covered += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    covered += cur_e - cur_s
    assert _union_length(s, e) == pytest.approx(covered)
    assert _union_length(np.zeros(0), np.zeros(0)) == 0.0


@pytest.mark.parametrize("schedule", [True, False])
def test_kernel_matches_reference_with_rows_waiting_for_another_core(schedule):
    """Program.not_before (a row's wait for another core, simulate_cores) in both kernels."""
    prog = random_program("trn2", 2000, 3)
    rng = np.random.default_rng(3)
    prog.not_before = np.where(rng.random(len(prog)) < 0.05, rng.uniform(0, 2e5, len(prog)), 0.0)
    fast = ns.simulate(prog, schedule=schedule)
    slow = ns.simulate(prog, reference=True, schedule=schedule)
    np.testing.assert_array_equal(fast.start_ns, slow.start_ns)
    np.testing.assert_array_equal(fast.end_ns, slow.end_ns)
    assert (fast.start_ns >= prog.not_before).all()
    prog.not_before = None
    assert ns.simulate(prog, schedule=schedule).total_ns < fast.total_ns


@pytest.mark.parametrize("reference", [False, True])
def test_cores_that_meet_wait_for_the_later_one(reference):
    """simulate_cores: core 0 works on VectorE before a core_barrier, core 1 meets it at once;
    core 1's wait row (the barrier's second) starts when core 0's signal has landed."""
    from neuron_sim.timing.simulate import simulate_cores
    progs = []
    for work in (20, 0):
        b = ns.ProgramBuilder("trn2")
        t = b.sbuf("t", (128, 512), "float32")
        for _ in range(work):
            b.memset(t, 1.0)
        b.instruction("core_barrier", data=t)
        progs.append(b.build())
    meet = [(np.array([len(p) - 2]), np.array([len(p) - 1])) for p in progs]
    r0, r1 = simulate_cores(progs, meet, reference=reference)
    sem = progs[0].chip.core_pair_semaphore_latency_s * 1e9
    assert r1.start_ns[-1] == r0.end_ns[-2] + sem > 20 * r0.busy_ns[0]
    assert r0.start_ns[-1] == r0.end_ns[-2]     # core 0 arrived last: its wait is its own signal
