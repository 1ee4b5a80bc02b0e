"""Launch surface: jit forms, targets, LNC/SPMD, environment variables, legacy benchmark."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def version_kernel(x):
    v = nisa.get_nc_version()
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=float(v.value))
    nisa.dma_copy(dst=out, src=t)
    return out


X = np.zeros((1, 1), np.float32)


@pytest.mark.parametrize("env,expect", [("trn1", 2), ("gen3", 3), ("trn3", 4), (None, 4)])
def test_target_from_environment(monkeypatch, env, expect):
    if env is None:
        monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    else:
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", env)
    assert nki.simulate(version_kernel)(X)[0, 0] == expect


def test_platform_target_argument_wins(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    k = nki.jit(platform_target="trn1")(version_kernel.func)
    assert k(X)[0, 0] == 2
    assert nki.last_report().target == "trn1"


def test_unknown_target():
    with pytest.raises(nki.NkiLaunchError, match="unknown platform target"):
        nki.simulate(version_kernel, platform_target="trn9")(X)


def test_jit_forms_and_nki_simulator_env(monkeypatch):
    monkeypatch.setenv("NKI_SIMULATOR", "1")

    def body(x):
        return version_kernel.func(x)

    for k in (nki.jit(body), nki.jit()(body), nki.jit(mode="torchxla")(body)):
        assert k(X, ).shape == (1, 1)


@nki.jit
def spmd_halves(x):
    """LNC=2: each core adds its program id + 1 to its half of the rows."""
    R, C = x.shape
    half = R // nl.num_programs(0)
    pid = nl.program_id(0)
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((half, C), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[pid * half:(pid + 1) * half, :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(pid + 1))
    nisa.dma_copy(dst=out[pid * half:(pid + 1) * half, :], src=t)
    return out


def test_lnc2_launch_runs_two_programs():
    x = np.zeros((256, 64), np.float32)
    out = nki.simulate(spmd_halves, platform_target="trn2")[2](x)
    np.testing.assert_array_equal(out[:128], 1.0)
    np.testing.assert_array_equal(out[128:], 2.0)
    rep = nki.last_report()
    assert len(rep.programs) == 2


def test_lnc_must_match_environment(monkeypatch):
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    with pytest.raises(nki.NkiLaunchError, match="NEURON_LOGICAL_NC_CONFIG=1"):
        nki.simulate(spmd_halves, platform_target="trn2")[2](np.zeros((256, 64), np.float32))


def test_lnc2_needs_trn2_or_later():
    with pytest.raises(nki.NkiLaunchError, match="needs Trn2 or Trn3"):
        spmd_halves[2].__class__(spmd_halves.func, platform_target="trn1", grid=(2,))(np.zeros((256, 64), np.float32))


def test_legacy_benchmark_reports_simulated_microseconds():
    bench = nki.benchmark(warmup=2, iters=5)(spmd_halves[2])
    bench(np.zeros((256, 64), np.float32))
    p50 = bench.benchmark_result.nc_latency.get_latency_percentile(50)
    p99 = bench.benchmark_result.nc_latency.get_latency_percentile(99)
    assert 0 < p50 == p99 == pytest.approx(nki.last_report().total_ns / 1e3)


def test_inputs_written_in_place_are_visible():
    @nki.jit
    def inplace(x):
        t = nl.load(x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=x, src=t)
        return x

    x = np.ones((128, 8), np.float32)
    nki.simulate(inplace)(x)
    np.testing.assert_array_equal(x, 3.0)


def test_timing_only_mode_traces_without_data():
    from nki_examples import load_example
    mt = load_example("matmul_tutorial")
    lhsT = np.zeros((512, 256), nl.bfloat16)
    rhs = np.zeros((512, 1024), nl.bfloat16)
    nki.simulate(mt.matmul_tiled, platform_target="trn1", numerics=False)(lhsT, rhs)
    rep = nki.last_report()
    assert rep.total_ns > 0 and rep.instructions == 2 * 2 * 4 * 3 + 2 * 2 * 2


def test_nki_imports_without_torch():
    import subprocess
    import sys
    code = ("import sys; import nki, nki.language, nki.isa; import numpy as np; "
            "assert 'torch' not in sys.modules, 'nki imported torch'")
    env = dict(__import__("os").environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env["PYTHONPATH"] = __import__("os").pathsep.join(sys.path)
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_legacy_profile_writes_a_chrome_trace(tmp_path):
    import json
    prof = nki.profile(working_directory=str(tmp_path), save_trace_name="mm.ntff")(spmd_halves[2])
    prof(np.zeros((256, 64), np.float32))
    trace = json.load(open(tmp_path / "mm.json"))
    assert trace["traceEvents"] and prof.benchmark_result.nc_latency.get_latency_percentile(50) > 0


def test_instruction_times_name_the_kernel_call_of_each_row():
    nki.simulate(version_kernel, platform_target="trn2")(X)
    rep = nki.last_report()
    rows = rep.instruction_times()
    assert [r.op for r in rows] == ["memset", "dma_copy"]
    memset, dma = rows
    assert memset.loc[0] == __file__ and memset.stream == "VectorE" and dma.kind == "dma"
    # the store waits for the memset; its data phase ends the kernel
    assert memset.end_ns <= dma.start_ns < dma.data_start_ns < dma.end_ns == rep.total_ns
    assert rep.instruction_times(op="dma_copy") == [dma]


@nki.jit
def _scale_inner(t, f):
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=f)
    return t


@nki.jit
def _outer(x):
    t = nl.load(x)
    _scale_inner(t, 2.0)            # a jit kernel called from a kernel is inlined
    _scale_inner(t, 3.0)
    o = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o


def test_kernels_compose_by_inlining():
    out = nki.simulate(_outer)(np.ones((128, 4), np.float32))
    np.testing.assert_array_equal(out, 6.0)
    assert nki.last_report().instructions == 4


@nki.jit
def _exchange(x):
    """LNC=2: each core writes its half of a shared tensor, then both read the whole of it."""
    R, C = x.shape
    pid, half = nl.program_id(0), R // 2
    shared = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((half, C), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[pid * half:(pid + 1) * half, :])
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(pid + 1))
    nisa.dma_copy(dst=shared[pid * half:(pid + 1) * half, :], src=t)
    nisa.core_barrier(shared, (0, 1))                   # without it the other half is unwritten
    whole = nl.ndarray((half, C), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=whole, src=shared[(1 - pid) * half:(2 - pid) * half, :])
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[pid * half:(pid + 1) * half, :], src=whole)
    return out


def test_core_barrier_lets_lnc2_programs_exchange_data():
    x = np.zeros((256, 32), np.float32)
    out = nki.simulate(_exchange, platform_target="trn2")[2](x)
    np.testing.assert_array_equal(out[:128], 2.0)      # core 0 read core 1's half
    np.testing.assert_array_equal(out[128:], 1.0)
    assert "core_barrier" in nki.last_report().programs[0].opnames


def test_error_in_one_lnc2_program_is_raised_not_deadlocked():
    @nki.jit
    def bad(x):
        if nl.program_id(0) == 1:
            nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)     # too many partitions
        nisa.core_barrier(x, (0, 1))
        return x

    with pytest.raises(nki.NkiValidationError, match="exceeds the 128 partitions"):
        nki.simulate(bad, platform_target="trn2")[2](np.zeros((4, 4), np.float32))


def test_fast_box_matches_core_box():
    """program._AP precomputes the dependency footprint; it must equal AccessPattern.box()."""
    from neuron_sim.nki import program, tracer
    from neuron_sim.nki.target import get_target
    from neuron_sim.program.ap import AccessPattern
    tr = tracer.KernelTrace(target=get_target("trn2"))
    plan = __import__("neuron_sim.nki.memory", fromlist=["MemoryPlan"]).MemoryPlan()
    m = program._Mapper(plan)
    with tracer.tracing(tr):
        s = nl.ndarray((128, 4, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
        h = nl.ndarray((1024, 2048), dtype=nl.float32, buffer=nl.shared_hbm)
        views = [s, s[0:64, 1, 0:256], s[32:64, :, ::2], s.permute((0, 2, 1)), s[:, 3, 511],
                 h, h[128:256, 512:1024], h[5, :], h[::2, 0:64], h.reshape((2048 * 1024,))[7:100]]
        for v in views:
            ap = m.ap(v, 0)
            core = AccessPattern(ap.tensor, ap.p_start, ap.p_size, ap.offset, ap.dims, ap.p_stride)
            assert ap.box() == core.box(), v


def test_legacy_output_argument_is_written_back():
    @nki.jit
    def legacy(a, out):
        t = nl.load(a)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nl.store(out[0:64, :], value=t[0:64, :])

    a = np.zeros((128, 8), np.float32)
    out = np.full((128, 8), -5.0, np.float32)
    nki.simulate_kernel(legacy, a, out)
    np.testing.assert_array_equal(out[:64], 1.0)
    np.testing.assert_array_equal(out[64:], -5.0)


@nki.jit
def many_instructions_kernel(x):
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    for k in range(2100):
        nisa.memset(dst=t, value=float(k))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_long_simulation_shows_progress(capsys, monkeypatch):
    """Issue 17: a long NKI simulation shows a bar (NEURON_SIM_PROGRESS, tqdm): instructions
    traced, then the stage; off, or without a terminal, nothing is printed."""
    pytest.importorskip("tqdm", reason="the progress bar is tqdm's (optional)")
    import neuron_sim.progress
    monkeypatch.setattr(neuron_sim.progress, "DELAY_S", 0)     # this kernel takes under 1 s
    monkeypatch.setenv("NEURON_SIM_PROGRESS", "on")
    assert nki.simulate(many_instructions_kernel)(X)[0, 0] == 2099
    err = capsys.readouterr().err
    assert "neuron-sim: NKI many_instructions_kernel" in err
    assert "2048 instructions" in err and "building and timing" in err
    monkeypatch.setenv("NEURON_SIM_PROGRESS", "auto")        # pytest's stderr is no terminal
    nki.simulate(many_instructions_kernel)(X)
    assert capsys.readouterr().err == ""


def test_launch_leaves_no_collection_and_no_trace_cycles(monkeypatch):
    """A launch makes its objects with the collector paused. Afterwards they are handed to the
    oldest generation without a collection (the young count is back to zero, so the next
    allocation does not walk them all), and its trace is freed by reference counting when the
    launch returns: with the collector off, none of the trace is left for it to find."""
    import gc
    import weakref
    from neuron_sim.nki import tracer
    from neuron_sim.nki.tensor import NkiTensor, Storage

    seen = []
    real = tracer.KernelTrace.__post_init__

    def keep(self):
        seen.append(weakref.ref(self))
        real(self)

    monkeypatch.setattr(tracer.KernelTrace, "__post_init__", keep)
    nki.simulate(version_kernel)(X)             # warm: first-use imports and caches
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        seen.clear()
        nki.simulate(version_kernel)(X)
        assert gc.get_count()[0] < 100
        assert len(seen) == 1 and seen[0]() is None     # freed without the collector
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = {type(o) for o in gc.garbage}
        assert not left & {tracer.KernelTrace, tracer.Instr, Storage, NkiTensor}, left
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


def test_launch_keeps_objects_the_process_froze():
    """A process that froze its objects (gc.freeze before forking) finds them still frozen
    after a launch (the launch's own hand-over to the oldest generation would unfreeze them)."""
    import gc
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        nki.simulate(version_kernel)(X)
        assert frozen > 0 and gc.get_freeze_count() > frozen // 2   # (some die meanwhile)
    finally:
        gc.unfreeze()
