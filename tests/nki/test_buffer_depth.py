"""The memory plan gives a loop's tiles as many buffers as SBUF holds: a load -> store pipeline
runs at the DMA rate instead of being serialised by two buffers x the ~1 us DMA latency."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim.nki import memory


@nki.jit
def copy_rows(x):
    n, F = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((n, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n // P):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * P:(i + 1) * P, :])
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=t)
    return out


def run(x):
    sim = nki.simulate(copy_rows, platform_target="trn2")
    np.testing.assert_array_equal(sim(x), x)
    return sim.report


def test_pipeline_gets_more_than_two_buffers_and_is_not_latency_bound(monkeypatch):
    x = np.arange(64 * 128 * 64, dtype=np.float32).reshape(64 * 128, 64)   # 64 tiles of 32 KiB
    deep = run(x)
    monkeypatch.setattr(memory, "BUFFERS_PER_SITE", 2)
    two = run(x)
    # two buffers: every other load waits for a store, ~2 DMA latencies per tile
    assert two.total_ms > 1.5 * deep.total_ms
    per_tile_us = deep.total_ms * 1e3 / 64
    assert per_tile_us < 1.0          # below one DMA fixed latency per tile


def test_depth_is_bounded_by_memory():
    """Tiles of 96 KiB per partition: only two fit in SBUF, and nothing spills."""
    x = np.zeros((8 * 128, 24 * 1024), np.float32)
    rep = run(x)
    assert rep.spills == 0


@nki.jit
def two_broadcasts(x, b, c):
    """Per row block: y = x * b (partition broadcast) * c (another broadcast), rows of 4096 FP32
    (8 PSUM banks per broadcast)."""
    blocks, F = b.shape
    P = x.shape[0] // blocks
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(blocks):
        rows = slice(i * P, (i + 1) * P)
        xt = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[rows, :])
        bt = nl.ndarray((1, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=bt, src=b[i:i + 1, :])
        ct = nl.ndarray((1, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ct, src=c[i:i + 1, :])
        y = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=xt, data2=bt.broadcast_to((P, F)), op=nl.multiply)
        nisa.tensor_tensor(dst=y, data1=y, data2=ct.broadcast_to((P, F)), op=nl.multiply)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=y)
    return out


def test_a_later_allocation_site_gets_psum_banks_too():
    """The first broadcast of the loop fills all 8 PSUM banks; the second must still rotate
    through several (the least recently freed bank of any site), so its TensorE matmul for the
    next bank runs while ScalarE drains the previous one. With a single bank the pairs ran in
    lock step (Mamba v2 at seq 5120: 30.5 ms instead of 25.9)."""
    rng = np.random.default_rng(0)
    F = 4096
    x = rng.standard_normal((2 * 128, F)).astype(np.float32)
    b = rng.standard_normal((2, F)).astype(np.float32)
    c = rng.standard_normal((2, F)).astype(np.float32)
    sim = nki.simulate(two_broadcasts, platform_target="trn1")
    y = sim(x, b, c)
    np.testing.assert_allclose(y, x * np.repeat(b, 128, 0) * np.repeat(c, 128, 0), rtol=1e-6)
    times = sorted(sim.report.instruction_times(), key=lambda t: t.row)
    line = max(t.loc[1] for t in times if t.op == "nc_matmul")        # the second broadcast
    mm = [t for t in times if t.op == "nc_matmul" and t.kind == "multiply_moving"
          and t.loc[1] == line]
    drains = [t for t in times if t.op == "activation" and t.loc[1] == line]
    assert len(mm) == len(drains) == 16
    overlapped = sum(m.start_ns < d.end_ns for m, d in zip(mm[1:], drains))
    assert overlapped >= 12


@nki.jit
def clean_input_under_pressure(x, y):
    """x is loaded once and read again at the end; three 48 KiB tiles in between do not fit
    beside it in 176 KiB, so x must leave SBUF for a while."""
    P, F = x.shape
    xt = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=xt, src=x)
    a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=y)
    nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=2.0)
    b = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=b, data1=a, data2=a, op=nl.add)
    c = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c, data1=b, data2=a, op=nl.add)
    nisa.tensor_tensor(dst=c, data1=c, data2=xt, op=nl.add)
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=c)
    return out


def test_a_clean_copy_of_an_input_is_fetched_again_not_stored():
    """Spilling a tile that only ever held a kernel input costs one transfer: the reload reads
    the input again; nothing is written to a spill slot."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((128, 12 * 1024)).astype(np.float32)
    y = rng.standard_normal((128, 12 * 1024)).astype(np.float32)
    sim = nki.simulate(clean_input_under_pressure, platform_target="trn1")
    np.testing.assert_allclose(sim(x, y), 6 * y + x, rtol=1e-6)
    rep = sim.report
    spills = [t for t in rep.instruction_times() if t.kind == "dma" and t.op is None]
    assert rep.spills == 1 and len(spills) == 1
    assert rep.spill_bytes == x.nbytes                  # the reload only
    prog = rep.programs[0]
    (row,) = [t.row for t in spills]
    assert prog.emits[row].params["spill"] == "reload"
    assert prog.emits[row].reads[0].tensor.name != prog.emits[row].writes[0].tensor.name + ".spill"


def test_liveness_recorded_while_tracing_equals_a_scan_of_the_instructions(monkeypatch):
    """The tracer records each on-chip storage's uses (KernelTrace.emit); the plan reads them.
    They must be what a scan of the instruction stream finds, in first-use order (the plan
    breaks ties by it), with partition broadcasts emitted inside another instruction's emit."""
    from nki_examples import load_example
    from neuron_sim.nki import launch
    traces = []

    def plan(tr):
        traces.append(tr)
        return memory.plan_memory(tr)
    monkeypatch.setattr(launch, "plan_memory", plan)
    rng = np.random.default_rng(0)
    qT = rng.standard_normal((64, 256)).astype(nl.bfloat16)
    nki.simulate(load_example("attention").attention_kernel, platform_target="trn2")(
        qT, qT, qT.T.copy(), causal=True)
    mamba = __import__("neuron_sim.calibrate.mamba", fromlist=["mamba_v3"])
    nki.simulate(mamba.mamba_v3, platform_target="trn2", numerics=False)(*mamba.inputs(256, 512))
    for tr in traces:
        for kind in ("sbuf", "psum"):
            scan = {}
            for ins in tr.instrs:
                for a in ins.reads + ins.writes:
                    if a.storage.buffer == kind:
                        lst = scan.setdefault(a.storage.id, [a.storage])
                        if len(lst) == 1 or lst[-1] != ins.index:
                            lst.append(ins.index)
            assert list(memory._Liveness(tr).uses[kind].items()) == list(scan.items())
