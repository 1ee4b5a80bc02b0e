"""The scheduling pass (neuron_sim/kernels/schedule.py): each engine's queue issues, from a window
of its next instructions, the one that can start earliest, within the data dependencies,
same-queue write-after-read/write order, buffer reuse and semaphores; the in-order timing engine
then runs that order."""

import importlib

import numpy as np

import neuron_sim as ns
from neuron_sim.engines import Engine
from neuron_sim.program import ProgramBuilder
from neuron_sim.timing import reference as ref

S = importlib.import_module("neuron_sim.timing.simulate")


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


def test_numba_and_python_schedulers_agree_and_timing_replays_the_order():
    from neuron_sim.calibrate.programs import matmul_tiled
    p = matmul_tiled("trn2", M=256, K=1024, N=1024)
    chip = p.chip
    order, sptr = S.issue_order(p, chip)
    porder, psptr = S.issue_order(p, chip, reference=True)
    assert np.array_equal(order, porder) and np.array_equal(sptr, psptr)
    args = S.kernel_args(p, chip)
    _, _, py_end, *_ = ref.schedule(*args, order, sptr)
    assert np.allclose(ns.simulate(p).end_ns, py_end)
    # TensorE keeps program order (LoadStationary reuse is decided in it)
    pe = order[sptr[int(Engine.TENSOR)]:sptr[int(Engine.TENSOR) + 1]]
    assert np.all(np.diff(pe) > 0)


def test_mamba_v2_vector_engine_is_the_busy_engine():
    """The published v2 profile: VectorE the busy engine, 99.6% active [Mamba]."""
    from neuron_sim.calibrate import mamba
    from neuron_sim.nki.launch import last_report, simulate
    simulate(mamba.mamba_v2, platform_target="trn1", numerics=False)(*mamba.inputs(512, 512))
    act = last_report().engine_active_percent
    assert max(act, key=act.get) == "VectorE"
    assert act["VectorE"] > 90
