"""Timing-engine throughput: simulate a >= 1M-instruction program with the numba kernel, compare
with the pure-Python reference loop of the same model in the same run, and report numba compile
time cold (empty cache) and warm (cache on disk).

Two programs: the main one is a real kernel made by the ProgramBuilder (the fully blocked BF16
matmul of the NKI tutorial, [4096,8192]@[8192,8192] on Trn2, 72k instructions) repeated back to
back until it exceeds 1M instructions; the second is a synthetic mix made from columns (4 DMA
queues, every engine, random extra dependencies), printed for comparison.
Both are timed with the scheduling pass (neuron_sim/kernels/schedule.py, which also gives the times;
in Python timing/reference.py's list_schedule), then in program order without it: the difference is
the cost of the pass.
The Python loop is run on a prefix of each program (dependencies only point backwards, so a
prefix is itself a valid program) and its per-instruction time is extrapolated to the full size;
the output says so. Last line (main program): RESULT instr_per_s=<n> speedup_vs_python=<x>
cpu_instr_per_s=<n> (the same best of 3 in CPU time of this process: on a shared machine the
wall time also counts the time other processes hold the cores)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import neuron_sim as ns  # noqa: E402
from neuron_sim.engines import Engine, Kind  # noqa: E402
from neuron_sim.program import Program  # noqa: E402
from neuron_sim.progress import progress  # noqa: E402
from neuron_sim.timing.simulate import scheduled  # noqa: E402


def repeat(prog: Program, copies: int) -> Program:
    """`copies` launches of `prog` back to back (same streams, dependencies shifted)."""
    n = len(prog)
    cols = {k: np.tile(v, copies) for k, v in prog.cols.items()}
    lens = np.diff(prog.dep_ptr)
    idx = np.concatenate([prog.dep_idx + c * n for c in range(copies)])
    ptr = np.concatenate([[0], np.cumsum(np.tile(lens, copies))]).astype(np.int64)
    return Program(prog.chip, cols, ptr, idx.astype(np.int64), list(prog.opnames),
                   name=f"{prog.name} x{copies}")


def kernel_program(min_n: int) -> tuple[Program, Program]:
    from neuron_sim.calibrate.programs import matmul_fully_blocked
    one = matmul_fully_blocked("trn2", name="fully blocked BF16 matmul (trn2)")
    return repeat(one, -(-min_n // len(one))), one


def make_program(n: int, chip: str = "trn2", seed: int = 0) -> Program:
    """A kernel-like mix (4 DMA queues) in repeating groups of 8: two loads (DMA), LoadStationary +
    MultiplyMoving (each MM depends on both loads), a VectorE PSUM drain, a ScalarE activation, a
    GpSimd op and a store; plus a few random backward dependencies."""
    rng = np.random.default_rng(seed)
    c = ns.get_chip(chip)
    pattern = np.array([Engine.DMA, Engine.DMA, Engine.TENSOR, Engine.TENSOR, Engine.VECTOR,
                        Engine.SCALAR, Engine.GPSIMD, Engine.DMA], np.int8)
    kinds = np.array([Kind.DMA, Kind.DMA, Kind.LOAD_STATIONARY, Kind.MULTIPLY_MOVING,
                      Kind.GENERIC, Kind.GENERIC, Kind.GENERIC, Kind.DMA], np.int8)
    reps = -(-n // 8)
    engine = np.tile(pattern, reps)[:n]
    kind = np.tile(kinds, reps)[:n]
    ii = np.tile(np.array([0, 0, 13.3, 213.3, 533.3, 426.7, 250.0, 0]), reps)[:n]
    lat = np.tile(np.array([0, 0, 0, 80.0, 229.2, 228.3, 225.0, 0]), reps)[:n]
    base = np.arange(n) - np.arange(n) % 8
    # dependencies: LS <- load0; MM <- load1; drain <- MM; act <- drain; pool <- act;
    # store <- pool; load0 of group g <- drain of group g-2 (buffer reuse)
    offs = np.tile(np.array([-14, -1, -2, -2, -1, -1, -1, -1]), reps)[:n]
    dep1 = np.where((np.arange(n) + offs >= 0) & (offs != 0), np.arange(n) + offs, -1)
    dep1[base == np.arange(n)] = np.where(np.arange(n)[base == np.arange(n)] >= 12,
                                          np.arange(n)[base == np.arange(n)] - 12, -1)
    extra = np.where(rng.random(n) < 0.05, np.maximum(np.arange(n) - rng.integers(1, 64, n), -1),
                     -1)
    deps = np.stack([dep1, extra], axis=1)
    counts = (deps >= 0).sum(axis=1)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    idx = deps[deps >= 0].astype(np.int64)
    dma = engine == Engine.DMA
    # DMA queues follow the engine that triggers them [DMAov]: loads from SyncE and ScalarE,
    # stores from GpSimd, plus one more, as NKI kernels typically use a handful of queues.
    queue = rng.integers(0, 4, n)
    return Program.from_columns(
        c, engine=engine, ii_ns=ii, lat_ns=lat, kind=kind, deps=(ptr, idx), dma_queue=queue,
        dma_engine_ns=np.where(dma, 364.2, 0.0), dma_hbm_ns=np.where(dma, 362.0, 0.0),
        dma_issue_ns=np.where(dma, 50.0, 0.0), dma_engines=np.where(dma, 16, 0),
        dma_engine0=queue, dma_bytes=np.where(dma, 131072.0, 0.0))


_COMPILE_SNIPPET = """
import sys, time
sys.path.insert(0, {root!r})
t = time.perf_counter()
import numpy as np
import neuron_sim as ns
from neuron_sim.program import Program
p = Program.from_columns(ns.get_chip("trn2"), engine=np.array([1, 2], np.int8),
                         ii_ns=np.array([1.0, 1.0]))
ns.simulate(p)
r = ns.simulate(p).engine_busy_ns   # also compiles the interval-union kernel
print(time.perf_counter() - t)
"""


def compile_times() -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        code = _COMPILE_SNIPPET.format(root=str(ROOT))
        cold = float(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                    capture_output=True, text=True).stdout.split()[-1])
        warm = float(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                    capture_output=True, text=True).stdout.split()[-1])
    return cold, warm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1_048_576, help="instructions to simulate")
    ap.add_argument("--python-n", type=int, default=60_000,
                    help="prefix simulated by the pure-Python loop (extrapolated per instruction)")
    args = ap.parse_args()

    cold, warm = compile_times()
    print(f"numba compile + first call: cold cache {cold:.2f} s, warm cache {warm:.2f} s "
          f"(fresh processes, including import)")

    t = time.perf_counter()
    kernel, one = kernel_program(args.n)
    print(f"main program: {kernel.name}: {len(kernel):,} instructions "
          f"({len(one):,} built by ProgramBuilder, then repeated) in {time.perf_counter() - t:.1f} s")
    rate, speedup, cpu_rate = measure(kernel, one)
    synth = make_program(args.n)
    print(f"synthetic mix: {len(synth):,} instructions from columns (4 DMA queues, all engines)")
    measure(synth, make_program(args.python_n))
    print(f"RESULT instr_per_s={rate:.0f} speedup_vs_python={speedup:.1f} "
          f"cpu_instr_per_s={cpu_rate:.0f}")


def measure(prog: Program, prefix: Program) -> tuple[float, float, float]:
    ns.simulate(prefix)                 # compile/load in this process before timing
    best = best_plain = best_cpu = np.inf
    for _ in progress(range(3), f"timing {len(prog):,} instructions", " runs"):
        t = time.perf_counter()
        c = time.process_time()
        res = ns.simulate(prog)
        best_cpu = min(best_cpu, time.process_time() - c)
        best = min(best, time.perf_counter() - t)
        t = time.perf_counter()
        plain = ns.simulate(prog, schedule=False)
        best_plain = min(best_plain, time.perf_counter() - t)
    rate = len(prog) / best
    print(f"  numba: {len(prog):,} instructions in {best:.3f} s -> {rate / 1e6:.2f} M instr/s "
          f"(CPU {best_cpu:.3f} s; simulated device time {res.total_ns / 1e6:.3f} ms)")
    print(f"  program order without the scheduling pass {best_plain:.3f} s "
          f"({len(prog) / best_plain / 1e6:.2f} M instr/s, {plain.total_ns / 1e6:.3f} ms "
          f"simulated): the pass adds {(best - best_plain) / len(prog) * 1e6:+.3f} s per million "
          f"instructions (it computes the times itself; the in-order timing kernel does too)")
    t = time.perf_counter()
    py_res = scheduled(prefix, prefix.chip, reference=True)     # the pass and the model, in Python
    py = time.perf_counter() - t
    assert py_res is not None
    py_rate = len(prefix) / py
    print(f"  python loop (same pass and model, timing/reference.py) on a {len(prefix):,}-"
          f"instruction prefix: {py:.2f} s -> {py_rate / 1e3:.1f} k instr/s; extrapolated to "
          f"{len(prog):,}: {len(prog) / py_rate:.1f} s")
    same = all(np.array_equal(a, b) for a, b in zip(scheduled(prefix, prefix.chip), py_res))
    print(f"  numba and python agree on the prefix (order and every time): {same}; "
          f"speedup {rate / py_rate:.1f}x")
    return rate, rate / py_rate, len(prog) / best_cpu


if __name__ == "__main__":
    main()
