"""The scheduling pass (neuron_sim/kernels/schedule.py): each engine's queue issues, from a window
of its next instructions, the one that can start earliest, within the data dependencies,
same-queue write-after-read/write order, buffer reuse and semaphores; the in-order timing engine
then runs that order."""

import importlib

import numpy as np
import pytest

import neuron_sim as ns
from neuron_sim.engines import Engine, Kind
from neuron_sim.program import Program, ProgramBuilder

S = importlib.import_module("neuron_sim.timing.simulate")
_ref = importlib.import_module("neuron_sim.timing.reference")


def two_chains(n=6, F=512):
    """Two independent chains of dependent VectorE instructions, traced one after the other (as
    two iterations of an affine_range loop are): in program order each instruction waits for the
    previous one's latency; scheduled, the chains interleave."""
    b = ProgramBuilder("trn2")
    tiles = [[b.sbuf(f"{c}{k}", (128, F), "float32") for k in range(n + 1)] for c in "ab"]
    for chain in tiles:
        b.memset(chain[0], 1.0)
        for k in range(n):
            b.tensor_scalar(chain[k + 1], chain[k], "multiply", 1.5)
    return b.build()


def test_independent_chains_interleave_and_the_engine_stays_busy():
    p = two_chains()
    in_order = ns.simulate(p, schedule=False)
    scheduled = ns.simulate(p)
    assert scheduled.total_ns < 0.8 * in_order.total_ns
    v = p.cols["engine"] == Engine.VECTOR
    # chain b's first multiply issues before chain a's last one
    a_last, b_first = 6, 8
    assert p.cols["engine"][a_last] == Engine.VECTOR and p.cols["engine"][b_first] == Engine.VECTOR
    assert scheduled.start_ns[b_first] < scheduled.start_ns[a_last]
    span = (scheduled.start_ns[v] + scheduled.busy_ns[v]).max() - scheduled.start_ns[v].min()
    busy = scheduled.busy_ns[v].sum() / span
    assert busy > 0.9


def test_a_dependent_chain_keeps_its_order():
    p = two_chains()
    r = ns.simulate(p)
    for c0 in (0, 7):
        starts = r.start_ns[c0:c0 + 7]
        assert np.all(np.diff(starts) > 0)


def test_same_queue_write_after_read_is_kept():
    """x is read by an instruction that waits for a DMA, then overwritten by one that waits for
    nothing: the overwrite may not go first, though it could start earlier."""
    b = ProgramBuilder("trn2")
    src = b.hbm("src", (128, 512), "float32")
    d = b.sbuf("d", (128, 512), "float32")
    x = b.sbuf("x", (128, 512), "float32")
    y = b.sbuf("y", (128, 512), "float32")
    b.memset(x, 0.0)
    b.dma_copy(d, src)
    read = b.tensor_tensor(y, d, x, "add")
    write = b.memset(x, 2.0)
    p = b.build()
    optr, oidx = p.order_edges()
    assert read in oidx[optr[write]:optr[write + 1]]
    r = ns.simulate(p)
    assert r.start_ns[write] >= r.start_ns[read] + r.busy_ns[read] - 1e-9


def test_independent_work_overtakes_a_waiting_instruction():
    b = ProgramBuilder("trn2")
    src = b.hbm("src", (128, 512), "float32")
    d = b.sbuf("d", (128, 512), "float32")
    x = b.sbuf("x", (128, 512), "float32")
    y = b.sbuf("y", (128, 512), "float32")
    b.dma_copy(d, src)
    waits = b.tensor_copy(y, d)
    free = b.memset(x, 1.0)
    r = ns.simulate(b.build())
    assert r.start_ns[free] < r.start_ns[waits]


def store_behind_prefetches(consumers=True, n_prefetch=6, other_queue=False):
    """A compiled graph's start, small: VectorE makes a tile (1.8 us), one DMA queue stores it,
    then the same queue has independent weight prefetches (5 us each on all 16 DMA engines),
    used only by the last instruction. With `consumers`, two 20 us VectorE instructions wait for
    the store (everything depends on it); without, nothing waits for the store. With
    `other_queue`, the prefetches are on queue 1, behind a small load that waits for an 8 us
    ScalarE instruction and that nothing critical waits for (they are hoisted past it)."""
    E, D = int(Engine.VECTOR), int(Engine.DMA)
    rows = [(E, 1800.0, 0.0, [], 0)]                                # 0: the tile
    rows.append((D, 0.0, 300.0, [0], 0))                            # 1: its store
    if other_queue:
        rows.append((int(Engine.SCALAR), 8000.0, 0.0, [], 0))       # 2: ScalarE
        rows.append((D, 0.0, 100.0, [2], 1))                        # 3: the small load
    first = len(rows)
    rows += [(D, 0.0, 5000.0, [], int(other_queue)) for _ in range(n_prefetch)]   # prefetches
    last = [1]
    if consumers:
        rows += [(E, 20000.0, 0.0, [1], 0), (E, 20000.0, 0.0, [len(rows)], 0)]
        last = [len(rows) - 1]
    rows.append((E, 100.0, 0.0, last + list(range(2, first + n_prefetch)), 0))
    n = len(rows)
    engine, ii, eng_ns, deps, queue = (list(col) for col in zip(*rows))
    engine, ii, eng_ns = np.array(engine), np.array(ii), np.array(eng_ns)
    dma = engine == D
    ptr = np.concatenate([[0], np.cumsum([len(d) for d in deps])]).astype(np.int64)
    idx = np.array([x for d in deps for x in d], np.int64)
    return Program.from_columns(
        ns.get_chip("trn2"), engine=engine.astype(np.int8), ii_ns=ii, lat_ns=np.zeros(n),
        kind=np.where(dma, Kind.DMA, Kind.GENERIC), deps=(ptr, idx),
        dma_queue=np.array(queue, np.int64), dma_engine_ns=eng_ns, dma_hbm_ns=np.zeros(n),
        dma_issue_ns=np.where(dma, 50.0, 0), dma_engines=np.where(dma, 16, 0),
        dma_engine0=np.zeros(n, np.int64), dma_bytes=np.where(dma, 4096.0, 0))


def test_a_prefetch_does_not_pass_the_store_everything_waits_for():
    """The DMA engines are FIFO: prefetches hoisted ahead of a store that is not ready yet would
    sit on the engines in front of it (30 us here). The store is more critical (its consumers
    come first on VectorE), so the prefetches stay behind it; the whole takes no longer than
    program order."""
    p = store_behind_prefetches()
    r = ns.simulate(p)
    assert r.data_start_ns[1] < r.end_ns[0] + 2000
    assert all(r.start_ns[k] >= r.start_ns[1] for k in range(2, 8))
    assert r.total_ns <= ns.simulate(p, schedule=False).total_ns
    assert r.total_ns < 48000


def test_a_prefetch_passes_a_store_nothing_waits_for():
    """Without consumers the store is the least critical DMA: the prefetches go first, at 0."""
    r = ns.simulate(store_behind_prefetches(consumers=False))
    assert all(r.start_ns[k] < r.start_ns[1] for k in range(2, 8))


def test_a_prefetch_of_another_queue_waits_for_the_store_on_its_engines():
    """The 16 DMA engines are shared by the queues: queue 1's prefetches, hoisted past its small
    load, would fill them ahead of queue 0's store everything waits for. They are held back
    until the store has triggered, and the pass says so with an order edge (after[x] = the
    store: the semaphore a compiler inserts), which the in-order replay honours."""
    p = store_behind_prefetches(other_queue=True)
    r = ns.simulate(p)
    assert r.data_start_ns[1] < r.end_ns[0] + 2000
    assert all(r.start_ns[1] <= r.start_ns[k] < r.start_ns[3] for k in range(4, 10))
    assert r.total_ns <= ns.simulate(p, schedule=False).total_ns
    order, sptr, after, *_ = S.scheduled(p, p.chip)
    assert after[4:10].tolist() == [1] * 6 and after[:4].tolist() == [-1] * 4


def random_windowed_program(n, seed):
    """Every engine and 4 DMA queues, random backward dependencies and random same-stream order
    edges."""
    rng = np.random.default_rng(seed)
    engine = rng.choice([0, 0, 1, 1, 2, 3, 5, 5], size=n).astype(np.int8)
    kind = np.where(engine == Engine.DMA, Kind.DMA, Kind.GENERIC)
    mm = engine == Engine.TENSOR
    kind[mm] = np.where(rng.random(mm.sum()) < 0.4, Kind.LOAD_STATIONARY, Kind.MULTIPLY_MOVING)
    ndeps = rng.integers(0, 3, n)
    ndeps[0] = 0
    ptr = np.concatenate([[0], np.cumsum(ndeps)])
    idx = np.concatenate([rng.integers(max(i - 40, 0), max(i, 1), k) for i, k in enumerate(ndeps)])
    dma = engine == Engine.DMA
    p = Program.from_columns(
        ns.get_chip("trn2"), engine=engine, ii_ns=rng.uniform(10, 900, n),
        lat_ns=rng.uniform(0, 300, n), kind=kind, deps=(ptr, idx.astype(np.int64)),
        dma_queue=rng.integers(0, 4, n), dma_engine_ns=np.where(dma, rng.uniform(20, 2000, n), 0),
        dma_hbm_ns=np.where(dma, rng.uniform(0, 1500, n), 0),
        dma_issue_ns=np.where(dma, 50.0, 0), dma_engines=np.where(dma, rng.integers(1, 17, n), 0),
        dma_engine0=rng.integers(0, 16, n), dma_bytes=np.where(dma, 4096.0, 0))
    stream = p.cols["stream"]
    optr, oidx = [0], []
    for i in range(n):
        same = np.nonzero(stream[max(i - 30, 0):i] == stream[i])[0] + max(i - 30, 0)
        if same.size and rng.random() < 0.3:
            oidx.append(int(rng.choice(same)))
        optr.append(len(oidx))
    p.ord_ptr, p.ord_idx = np.array(optr, np.int64), np.array(oidx, np.int64)
    return p


def _programs():
    from neuron_sim.calibrate.programs import matmul_fully_blocked, matmul_tiled
    # the fully blocked matmul: DMAs of queue 6 wait for the 16 matmuls reading their
    # buffer (the kernel's dependency scan then waits for the last of them, not the first)
    return [two_chains(), matmul_tiled("trn2", M=256, K=1024, N=1024),
            matmul_fully_blocked("trn2", M=2048, K=2048, N=2048, tiles_m=4, tiles_n=2, tiles_k=2),
            random_windowed_program(3000, 0), random_windowed_program(3000, 1),
            store_behind_prefetches(), store_behind_prefetches(consumers=False),
            store_behind_prefetches(other_queue=True)]


@pytest.mark.parametrize("k", range(8))
def test_numba_pass_equals_the_readable_reference_and_in_order_timing_replays_it(k):
    """The kernel (kernels/schedule.py) against timing/reference.py's list_schedule: the same
    issue order per queue and the same start, end, data-start and busy times, bit for bit; the
    in-order timing kernel given that order gives those times too."""
    from neuron_sim.kernels.timing import schedule as in_order
    p = _programs()[k]
    fast = S.scheduled(p, p.chip)
    slow = S.scheduled(p, p.chip, reference=True)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    order, sptr, after, *times = fast
    _, *replay, _ = in_order(*S.kernel_args(p, p.chip, False), order, sptr, after)
    for a, b in zip(times, replay):
        np.testing.assert_array_equal(a, b)
    _, *replay, _ = _ref.schedule(*S.kernel_args(p, p.chip), order, sptr, after)
    for a, b in zip(times, replay):
        np.testing.assert_array_equal(a, b)
    # TensorE keeps program order (LoadStationary reuse is decided in it)
    pe = order[sptr[int(Engine.TENSOR)]:sptr[int(Engine.TENSOR) + 1]]
    assert np.all(np.diff(pe) > 0)
    # every same-stream order edge is kept
    pos = np.empty(len(p), np.int64)
    pos[order] = np.arange(len(p))
    optr, oidx = p.order_edges()
    for i in range(len(p)):
        assert np.all(pos[oidx[optr[i]:optr[i + 1]]] < pos[i])


def test_mamba_v2_vector_engine_is_the_busy_engine():
    """The published v2 profile: VectorE the busy engine, 99.6% active [Mamba]."""
    from neuron_sim.calibrate import mamba
    from neuron_sim.nki.launch import last_report, simulate
    simulate(mamba.mamba_v2, platform_target="trn1", numerics=False)(*mamba.inputs(512, 512))
    act = last_report().engine_active_percent
    assert max(act, key=act.get) == "VectorE"
    assert act["VectorE"] > 90
