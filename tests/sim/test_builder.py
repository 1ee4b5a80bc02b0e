"""The program builder's two ways of finding dependencies give the same program: the bulk pass
over the recorded boxes (neuron_sim/kernels/deps.py, the default) and the per-instruction
reference (`ProgramBuilder._auto`, NEURON_SIM_REFERENCE=1). Same columns, dependencies and
same-stream order edges, on calibration programs, NKI kernels, spills, semaphores and explicit
dependencies."""

import weakref

import numpy as np
import pytest

from neuron_sim.calibrate import mamba
from neuron_sim.calibrate import programs as P
from neuron_sim.errors import DeadlockError, ProgramError
from neuron_sim.nki.launch import last_report, simulate as nki_simulate
from neuron_sim.program import ProgramBuilder
from neuron_sim.program import builder as B
from neuron_sim.program import repeat as R


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


def _wide_fan_in(chip="trn2"):
    """Hundreds of live accesses of one tile, instructions with hundreds of dependencies and
    order edges, writes that hide most entries: the bulk pass grows every buffer it has and
    compacts its live lists on the way (kernels/deps.py)."""
    b = ProgramBuilder(chip)
    t = b.sbuf("t", (128, 4096), "float32")
    u = b.sbuf("u", (128, 4096), "float32")
    for i in range(200):
        b.memset(t[:, i * 16:(i + 1) * 16], float(i), engine="gpsimd" if i % 2 else "vector")
    for i in range(200):
        b.tensor_copy(u[:, i * 16:(i + 1) * 16], t[:, i * 8:i * 8 + 1024], engine="scalar")
    b.tensor_copy(t, u, engine="vector", deps=list(range(0, 400, 3)))
    for i in range(128):
        b.memset(t[:, i * 32:(i + 1) * 32], 0.0, engine="vector" if i % 3 else "gpsimd")
        b.tensor_copy(u[:, i * 32:(i + 1) * 32], t[:, 0:(i + 1) * 32], engine="scalar")
    return b.build()


def test_bulk_deps_equal_reference_when_the_pass_grows_its_buffers(monkeypatch):
    fast, ref = _both(_wide_fan_in, monkeypatch)
    _equal(fast, ref)
    per_row = np.diff(fast.dep_ptr)
    assert per_row.max() > 64 and fast.dep_idx.size > len(fast)     # beyond the first buffers
    assert fast.order_edges()[1].size > len(fast) // 4


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


# ---- ProgramBuilder.repeat: loops written in bulk equal the loops run ----------------------------

def _operands(prog):
    """Every instruction's operand record, with tensors by name (builders make their own)."""
    ap = lambda x: (x.tensor.name, x.p_start, x.p_size, x.offset, x.dims, x.p_stride)
    return [(e.name, e.engine, e.kind, e.ii_cycles, e.lat_cycles, e.flops, e.dma, e.params,
             [ap(x) for x in e.reads], [ap(x) for x in e.writes]) for e in prog.emits]


def _three_ways(make, monkeypatch):
    """(repeat as it is, repeat running every iteration, the per-instruction reference)."""
    bulk = make()
    with monkeypatch.context() as m:
        m.setattr(B.ProgramBuilder, "_sample_then_synthesize", lambda self, *args: 0)
        loop = make()
        m.setattr(B, "_reference_default", lambda: True)
        ref = make()
    return bulk, loop, ref


def _same_three_ways(make, monkeypatch):
    """`_three_ways`, asserting the loop and the reference equal repeat's program (columns,
    deps, order edges and every operand record); returns (bulk, loop)."""
    bulk, loop, ref = _three_ways(make, monkeypatch)
    for other in (loop, ref):
        _equal(bulk, other)
        assert _operands(bulk) == _operands(other)
    return bulk, loop


def _written_in_bulk(prog) -> bool:
    return isinstance(prog.emits, R.LazyEmits)


@pytest.mark.parametrize("name", ["C1 tiled", "C2 hoist", "C3 block free", "C4 fully blocked",
                                  "C8 with spills"])
def test_repeat_equals_the_loop_and_the_reference_on_calibration_programs(name, monkeypatch):
    bulk, loop = _same_three_ways(PROGRAMS[name], monkeypatch)
    assert _written_in_bulk(bulk) and not _written_in_bulk(loop)


def _nested(chip="trn2", keep_operands=True):
    """Nested loops with round-robin buffers (periods 3 and 2), a stationary reused across
    iterations and after the loop, explicit deps before the loop and one iteration back, spill
    stores, and an inner loop whose first iteration differs (accumulate=False)."""
    b = ProgramBuilder(chip, keep_operands=keep_operands)
    h = b.hbm("h", (128, 64 * 512), "bfloat16")
    o = b.hbm("o", (128, 64 * 512), "bfloat16")
    tiles = [b.sbuf(f"t{i}", (128, 512), "bfloat16") for i in range(3)]
    w = b.sbuf("w", (128, 128), "bfloat16")
    ps = [b.psum(f"p{i}", (128, 512)) for i in range(2)]
    outs = b.sbuf("outs", (128, 64, 512), "bfloat16")
    slot = b.spill_slot("outs", (128, 64, 512), "bfloat16")
    first = b.dma_copy(w, h[:, 0:128])

    def body(i):
        t = tiles[i % 3]
        b.dma_copy(t, h[:, i * 512:(i + 1) * 512], queue=0, deps=[first])
        b.repeat(4, lambda j: b.nc_matmul(ps[i % 2][:, 0:128], w, t[:, j * 128:(j + 1) * 128],
                                          accumulate=j > 0))
        c = b.tensor_copy(outs[:, i, :], ps[i % 2])
        b.spill_store(slot[:, i, :], outs[:, i, :], queue=2, deps=[c - 3])
        b.dma_copy(o[:, i * 512:(i + 1) * 512], outs[:, i, :], queue=1)
    b.repeat(64, body)
    b.nc_matmul(ps[0][:, 0:128], w, tiles[0][:, 0:128])     # w still loaded: no LoadStationary
    return b, b.build()


@pytest.mark.parametrize("keep_operands", [True, False])
def test_repeat_nested_periodic_loops_equal_the_loop_and_the_reference(keep_operands,
                                                                       monkeypatch):
    bulk, loop, ref = _three_ways(lambda: _nested(keep_operands=keep_operands)[1], monkeypatch)
    for other in (loop, ref):
        _equal(bulk, other)
    if keep_operands:
        assert _written_in_bulk(bulk)
        assert _operands(bulk) == _operands(loop) == _operands(ref)
    assert bulk.counts()["load_stationary"] == 1
    b, _ = _nested()
    assert b.spill_bytes == 64 * 128 * 512 * 2


def test_repeat_flushes_sampled_iterations_into_the_segments_a_flush_per_iteration_makes(
        monkeypatch):
    """repeat() flushes the iterations it samples when it compares them, as one segment each
    (_cut): the segments, and the program, are those of a flush after each iteration."""
    flushes = []
    flush = B.ProgramBuilder._flush
    monkeypatch.setattr(B.ProgramBuilder, "_flush",
                        lambda self: flushes.append(len(self._rids)) or flush(self))
    b, prog = _nested()
    lazy = sum(n > 0 for n in flushes)
    flushes.clear()
    monkeypatch.setattr(B.ProgramBuilder, "_cut", B.ProgramBuilder._flush)
    b2, prog2 = _nested()
    assert b._segs.bounds == b2._segs.bounds and len(b._segs) > 40
    _equal(prog, prog2)
    assert _operands(prog) == _operands(prog2)
    assert lazy < sum(n > 0 for n in flushes)


def _not_affine(kind):
    b = ProgramBuilder("trn2")
    x = b.sbuf("x", (128, 4096), "float32")
    h = b.hbm("h", (128, 4096), "float32")

    def body(i):
        if kind == "squares":                          # offsets i*i: not a constant step
            b.memset(x[:, i * i:i * i + 8], 0.0)
        elif kind == "alloc":                          # a fresh tile per iteration
            t = b.sbuf(f"t{i}", (128, 64), "float32")
            b.tensor_copy(t, x[:, i * 64:(i + 1) * 64])
            b.free(t)
        elif kind == "queue":                          # DMA queues taken round-robin
            b.dma_copy(x[:, i * 8:(i + 1) * 8], h[:, i * 8:(i + 1) * 8])
        elif kind == "semaphore":
            b.memset(x[:, i * 8:(i + 1) * 8], 0.0, signal=1)
            b.tensor_copy(x[:, 2048 + i * 8:2048 + (i + 1) * 8], x[:, i * 8:(i + 1) * 8],
                          engine="scalar", wait=[(1, i + 1)])
        elif kind == "change":                         # iteration 2 differs from 0 and 1 (a
            # change after the iterations repeat() runs breaks its contract: body must be affine)
            b.memset(x[:, i * 8:(i + 1) * 8], 0.0, engine="gpsimd" if i == 2 else "vector")
    b.repeat(40, body)
    return b.build()


@pytest.mark.parametrize("kind", ["squares", "alloc", "queue", "semaphore", "change"])
def test_repeat_runs_every_iteration_when_they_are_not_affine(kind, monkeypatch):
    bulk, _ = _same_three_ways(lambda: _not_affine(kind), monkeypatch)
    assert not _written_in_bulk(bulk)


def test_repeat_count_errors_and_ranges():
    b = ProgramBuilder("trn2")
    x = b.sbuf("x", (128, 512), "float32")
    with pytest.raises(ProgramError, match="count must be >= 0"):
        b.repeat(-1, lambda i: None)
    assert b.repeat(0, lambda i: b.memset(x, 0.0)) == range(0, 0)
    assert b.repeat(8, lambda i: b.memset(x[:, i * 64:(i + 1) * 64], 0.0)) == range(0, 8)
    assert b.repeat(3, lambda i: b.memset(x[:, i:i + 1], 0.0)) == range(8, 11)


def _precedents():
    """One loop body (same code, same count) repeated with different steps and buffer phases: a
    later loop is written from an earlier one only when its first iterations match it shifted."""
    b = ProgramBuilder("trn2")
    x = b.sbuf("x", (128, 8192), "float32")
    tiles = [b.sbuf(f"t{i}", (128, 64), "float32") for i in range(2)]

    def loop(stride, phase, base):
        b.repeat(16, lambda i: b.tensor_copy(tiles[(phase + i) % 2],
                                             x[:, base + i * stride:base + i * stride + 64]))
    for stride, phase, base in [(64, 0, 0), (64, 0, 2048), (128, 0, 0), (64, 1, 0), (64, 0, 64)]:
        loop(stride, phase, base)
    return b.build()


def test_repeat_reuses_an_earlier_loop_only_when_it_matches(monkeypatch):
    bulk, _ = _same_three_ways(_precedents, monkeypatch)
    assert _written_in_bulk(bulk)


def _renamed(calls, pool):
    """Inner loops (same code and count) on other tensors than the first one: a stationary block
    per outer index (renamed; the loaded stationary moves along it), a pool of 2 buffers taken
    from either end (renamed into each other: two iterations show both buffers) and a buffer of
    a pool of 4 (`pool`): the same pool from the same phase in every loop, from a phase that
    moves, or another pool per loop. The last two are not renamings: two iterations do not show
    which buffers the other two are. The loop ends on the stationary the next matmul uses."""
    b = ProgramBuilder("trn2")
    h = b.hbm("h", (128, 3 * 2048), "bfloat16")
    blocks = [b.sbuf(f"blk{m}", (128, 2048), "bfloat16") for m in range(3)]
    mov = b.sbuf("mov", (128, 8192), "bfloat16")
    two = [b.sbuf(f"two{i}", (128, 64), "float32") for i in range(2)]
    fours = [[b.sbuf(f"four{m}.{i}", (128, 64), "float32") for i in range(4)] for m in range(3)]
    ps = [b.psum(f"ps{i}", (128, 512)) for i in range(2)]
    at = {"fixed": lambda m, i: fours[0][i % 4], "moving": lambda m, i: fours[0][(m + i) % 4],
          "other": lambda m, i: fours[m][(m + i) % 4]}[pool]
    for m in range(3):
        b.dma_copy(blocks[m], h[:, m * 2048:(m + 1) * 2048], queue=0)

    def outer(m):
        def body(i):
            calls.append(m)
            b.nc_matmul(ps[i % 2][:, 0:128], blocks[m][:, i * 128:(i + 1) * 128],
                        mov[:, (m * 16 + i) * 32:(m * 16 + i) * 32 + 128])
            b.tensor_copy(two[(m + i) % 2], ps[i % 2][:, 0:64])
            b.tensor_copy(at(m, i), two[(m + i) % 2], engine="scalar")
        b.repeat(16, body)
    for m in range(3):
        outer(m)
    b.nc_matmul(ps[0][:, 0:128], blocks[2][:, 15 * 128:16 * 128], mov[:, 0:128])
    return b.build()


@pytest.mark.parametrize("pool", ["fixed", "moving", "other"])
def test_repeat_renames_the_tensors_of_an_earlier_loop_only_when_it_is_safe(pool, monkeypatch):
    calls = []
    _renamed(calls, pool)
    ran = [calls.count(m) for m in range(3)]
    # the first loop runs until its period (4) showed; the later ones after two iterations when
    # a renaming explains them, else again until the period shows
    assert ran[0] > 4 and (ran[1:] == [2, 2] if pool == "fixed" else min(ran[1:]) > 4)
    bulk, _ = _same_three_ways(lambda: _renamed([], pool), monkeypatch)
    assert _written_in_bulk(bulk) and bulk.counts()["load_stationary"] == 48


def test_repeat_start_runs_the_iterations_from_start():
    b = ProgramBuilder("trn2")
    x = b.sbuf("x", (128, 512), "float32")
    seen = []

    def body(i):
        seen.append(i)
        b.memset(x[:, i * 8:(i + 1) * 8], 0.0)
    assert b.repeat(20, body, start=30) == range(0, 20)
    assert seen[:3] == [30, 31, 32]
    prog = b.build()
    assert [e.writes[0].offset for e in prog.emits] == [i * 8 for i in range(30, 50)]
    assert prog.emits[-1].writes[0].offset == 49 * 8
    assert [e.writes[0].offset for e in prog.emits[18:]] == [48 * 8, 49 * 8]
    with pytest.raises(IndexError, match="instruction 20 out of range for a program of 20"):
        prog.emits[20]


def test_segments_views_equal_the_appended_segments_across_growths():
    """repeat.Segments keeps the segments end to end; a run of them is one Seg of views with
    local CSR pointers, still valid after the columns grew past it."""
    rng = np.random.default_rng(0)

    def seg(n):
        nx, na = rng.integers(0, 3, n), rng.integers(1, 4, n)
        ints = lambda k: rng.integers(0, 1 << 40, k)
        return R.Seg(ints(n), np.r_[0, np.cumsum(nx)], ints(nx.sum()), np.r_[0, np.cumsum(na)],
                     ints(na.sum()), rng.integers(0, 2, na.sum()), ints((na.sum(), 4)),
                     ints(na.sum()), ints(na.sum()), ints(n), ints(n))

    store, segs, views = R.Segments(), [], []
    for n in [3, 700, 1, 5000, 40, 20000]:           # past the first capacity, twice
        segs.append(seg(n))
        store.append(segs[-1])
        views.append(store[len(segs) - 2:len(segs)])  # the last two, made before later growths
    for k, s in enumerate(segs):
        one = store[k:k + 1]
        for f in ("rid", "x_ptr", "x_idx", "acc_ptr", "track", "write", "box", "pst", "off",
                  "base", "cls"):
            np.testing.assert_array_equal(getattr(one, f), getattr(s, f), err_msg=f)
    for k, v in enumerate(views):
        pair = segs[max(k - 1, 0):k + 1]
        np.testing.assert_array_equal(v.rid, np.concatenate([s.rid for s in pair]))
        np.testing.assert_array_equal(v.box, np.concatenate([s.box for s in pair]))
        assert v.acc_ptr[0] == 0 and v.acc_ptr[-1] == v.track.shape[0]
        assert v.x_ptr[0] == 0 and v.x_ptr[-1] == v.x_idx.shape[0]
    assert len(store) == len(segs) and store[:].n == sum(s.n for s in segs)


@pytest.mark.parametrize("name", ["C1 tiled", "C8 with spills", "nested"])
def test_synthesize_kernel_equals_its_numpy_reference(name, monkeypatch):
    """repeat.synthesize (neuron_sim/kernels/repeat.py) writes the same columns as
    repeat.synthesize_reference for every loop the program writes in bulk, at any row offset."""
    calls, kernel = [], R.synthesize
    monkeypatch.setattr(R, "synthesize", lambda t, start, stop, out: calls.append(
        (t, start, stop)) or kernel(t, start, stop, out))
    (PROGRAMS[name] if name != "nested" else lambda: _nested()[1])()
    assert calls and (any(t.period > 1 for t, _, _ in calls) or name == "C1 tiled")
    assert any(t.x_idx.size for t, _, _ in calls) or name != "nested"   # explicit deps move
    for t, start, stop in calls:
        outs = []
        for write in (kernel, R.synthesize_reference):
            out = R.Segments()
            out.append(R.Seg(*[np.arange(k) for k in (3, 4, 2, 4, 5, 5)], np.ones((5, 4), int),
                             np.arange(5), np.arange(5), np.arange(3), np.arange(3)))
            assert write(t, start, stop, out) == (stop - start) * t.length
            outs.append(out[:])
        for f in ("rid", "x_ptr", "x_idx", "acc_ptr", "track", "write", "box", "pst", "off",
                  "base", "cls"):
            np.testing.assert_array_equal(getattr(outs[0], f), getattr(outs[1], f), err_msg=f)


def test_write_counts_equal_the_iterations_counted_one_by_one(monkeypatch):
    """repeat.write_counts (the tensors' write counts a bulk-written loop adds) equals counting
    each iteration's phase sample, for every loop of the nested periodic program and C8, over
    whole and partial ranges of iterations."""
    templates, write = [], R.synthesize
    monkeypatch.setattr(R, "synthesize", lambda t, start, stop, out: templates.append(
        (t, start, stop)) or write(t, start, stop, out))
    _nested()
    PROGRAMS["C8 with spills"]()
    assert {t.period for t, _, _ in templates} >= {1, 2, 6}
    for t, start, stop in templates:
        for lo, hi in [(start, stop), (start, start + 1), (start + 1, stop), (0, stop)]:
            one_by_one = {}
            for k in range(lo, hi):
                for track in t.track[(k - t.first) % t.period][t.write == 1].tolist():
                    one_by_one[track] = one_by_one.get(track, 0) + 1
            assert R.write_counts(t, lo, hi) == one_by_one


def test_same_step_kernel_equals_its_numpy_reference():
    """kernels/repeat.py's _same_step (one iteration's positions moved from another's by the
    given steps) answers as _same_step_reference, with a wrong step in any field or none."""
    from neuron_sim.kernels.repeat import _same_step, _same_step_reference
    rng = np.random.default_rng(1)
    for na, nx in [(1, 0), (7, 3), (300, 40)]:
        a = [rng.integers(-1 << 40, 1 << 40, s) for s in ((na, 4), na, na, nx)]
        d = [rng.integers(-1 << 20, 1 << 20, s) for s in ((na, 4), na, na, nx)]
        for wrong in (None, 0, 1, 2, 3):
            b = [x + y for x, y in zip(a, d)]
            if wrong is not None:
                if b[wrong].size == 0:
                    continue
                b[wrong].reshape(-1)[-1] += 1
            want = _same_step_reference(*a, *b, *d)
            assert want == (wrong is None) and _same_step(*a, *b, *d) == want


def test_recycled_columns_leave_built_programs_intact():
    """A builder that is gone hands its columns to the next one (repeat.Segments.recycle: fewer
    fresh pages), but not those a Program still sees (its LazyEmits' views): an earlier
    program's operands are the same after later builds write into the recycled columns."""
    first = PROGRAMS["C8 with spills"]()
    assert _written_in_bulk(first)
    seen = _operands(first)
    assert "box" in R._SPARE and "pst" not in R._SPARE      # pst: first.emits reads it
    box = weakref.ref(R._SPARE["box"])      # (a reference would keep it from the pool)
    again = PROGRAMS["C8 with spills"]()
    assert R._SPARE["box"] is box()                         # used by the second, handed back
    assert _operands(first) == seen == _operands(again)
    _equal(first, again)


def test_sliced_patterns_carry_the_box_and_record_of_their_footprint():
    """Tensor.__getitem__ makes each pattern's record (box, position) as it slices; it equals what
    AccessPattern._footprint / record() compute from the pattern's fields (the reference), for
    HBM, SBUF and PSUM tensors, views, partition offsets, ints, steps and empty ranges."""
    import random
    from neuron_sim.program.ap import Memory, Tensor
    rng = random.Random(0)
    tensors = [Tensor("t", m, s, "float32") for m in Memory
               for s in [(128,), (64, 512), (128, 8, 2048), (16, 4, 6, 10)]]
    tensors += [Tensor("p", Memory.SBUF, (64, 8, 512), "float32", 1024, 32)]
    tensors += [tensors[-1].view((32, 4, 128))]
    checked = 0
    for t in tensors:
        for _ in range(300):
            idx = []
            for d, n in enumerate(t.shape):
                r = rng.random()
                step = rng.choice([None, 1, 2, 3]) if d or t.memory == Memory.HBM else None
                idx.append(rng.randrange(-n, n) if r < 0.3 else slice(None) if r < 0.5 else
                           slice(rng.randrange(-n, n + 2), rng.randrange(-n, n + 3), step))
            try:
                ap = t[tuple(idx[:rng.randrange(1, len(idx) + 1)])]
            except IndexError:
                continue
            made = ap._rec
            assert ap._box is None                  # not kept apart: box() reads the record
            assert ap.box() == made[:4]
            object.__setattr__(ap, "_box", None)
            object.__setattr__(ap, "_rec", None)
            assert (ap._footprint(), ap.record()) == (made[:4], made)
            checked += 1
    assert checked > 1000


def test_sliced_patterns_of_one_shape_share_their_dims_and_geometry(monkeypatch):
    """Tensor.__getitem__ gives the patterns of one shape one dims tuple (fewer objects for the
    collector); the table of shapes is bounded and its values are the dims sliced."""
    from neuron_sim.program import ap as A
    t = A.Tensor("t", A.Memory.SBUF, (128, 8, 512), "float32")
    a, b = t[:, 0, 0:256], t[:, 3, 256:512]
    assert a.dims == ((256, 1),) and a.dims is b.dims
    assert t[:, 0:2, 0:256].dims == ((2, 512), (256, 1))
    assert a.geometry() is b.geometry() and a.geometry() == (A.Memory.SBUF, "float32", 0, 128,
                                                             ((256, 1),), 1)
    monkeypatch.setattr(A, "_DIMS", {})
    monkeypatch.setattr(A, "_GEOS", {})
    monkeypatch.setattr(A, "_SHARED_MAX", 4)
    aps = [t[:, 0, 0:k] for k in range(1, 10)]
    assert len(A._DIMS) <= 4 and [x.dims for x in aps] == [((k, 1),) for k in range(1, 10)]
    assert [x.geometry()[4] for x in aps] == [x.dims for x in aps] and len(A._GEOS) <= 4


@pytest.mark.parametrize("shape", [(), (5,), (0,), (2, 3, 4), (3, 0, 4), (2, 0), (0, 3),
                                   (2, 1, 0, 3)])
def test_row_major_strides_are_torchs_contiguous_strides(shape):
    """program.ap.row_major, the one row-major stride rule of tensors, NKI views and TensorSpec,
    steps over a zero-size dimension as PyTorch does (as over size 1)."""
    torch = pytest.importorskip("torch", reason="the reference is torch's own .stride()")
    from neuron_sim.program.ap import row_major
    assert row_major(shape) == torch.empty(shape).stride()


def test_scalar_operands_may_be_tensors_or_patterns():
    # tensor_scalar took a [P, 1] tile only as an access pattern (a Tensor raised AttributeError
    # in the operand check); activation's bias and scale took both
    from neuron_sim import execute
    b = ProgramBuilder("trn2")
    x, s, y = (b.hbm(n, (128, w), "float32") for n, w in (("x", 8), ("s", 1), ("y", 8)))
    xs, ss = b.sbuf("xs", (128, 8), "float32"), b.sbuf("ss", (128, 1), "float32")
    b.dma_copy(xs, x)
    b.dma_copy(ss, s)
    b.tensor_scalar(xs, xs, "multiply", ss, "add", ss[:, 0:1])
    b.activation(xs, xs, "copy", bias=ss, scale=ss)
    b.dma_copy(y, xs)
    xv, sv = np.random.rand(128, 8).astype(np.float32), np.random.rand(128, 1).astype(np.float32)
    got = execute(b.build(), {"x": xv, "s": sv})["y"]
    np.testing.assert_allclose(got, (xv * sv + sv) * sv + sv, rtol=1e-6)


@pytest.mark.parametrize("moving", [False, True], ids=["fixed tile", "tile per iteration"])
def test_repeat_keeps_the_tile_operands_the_semantics_read_from_params(moving):
    """tensor_scalar and activation read their [P, 1] tile operands from emit.params, which
    LazyEmits copies unchanged: a loop is written in bulk only when its params are equal in every
    iteration (repeat.emit_key holds them by value, a pattern with its tensor and position), so
    a tile taken at a new column each iteration makes the loop run every iteration."""
    from neuron_sim import execute
    n = 16
    b = ProgramBuilder("trn2")
    x, s, y = (b.hbm(k, (128, w), "float32") for k, w in (("x", n * 8), ("s", n), ("y", n * 8)))
    xs, ss, ys = (b.sbuf(k, (128, w), "float32") for k, w in (("xs", n * 8), ("ss", n),
                                                               ("ys", n * 8)))
    b.dma_copy(xs, x)
    b.dma_copy(ss, s)
    tile = (lambda i: ss[:, i:i + 1]) if moving else (lambda i: ss[:, 3:4])

    def body(i):
        cols = slice(i * 8, (i + 1) * 8)
        b.tensor_scalar(ys[:, cols], xs[:, cols], "multiply", tile(i))
        b.activation(ys[:, cols], ys[:, cols], "copy", bias=tile(i), scale=tile(i))
    b.repeat(n, body)
    b.dma_copy(y, ys)
    prog = b.build()
    rng = np.random.default_rng(0)
    xv, sv = rng.random((128, n * 8), np.float32), rng.random((128, n), np.float32)
    got = execute(prog, {"x": xv, "s": sv})["y"]
    t = np.repeat(sv, 8, axis=1) if moving else sv[:, 3:4]
    np.testing.assert_allclose(got, xv * t * t + t, rtol=1e-6)
    assert _written_in_bulk(prog) != moving
