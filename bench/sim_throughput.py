"""Timing-engine throughput: simulate a >= 1M-instruction program with the numba kernel, compare
with the pure-Python reference loop of the same model in the same run, and report numba compile
time cold (empty cache) and warm (cache on disk).

The Python loop is run on a prefix of the same program (dependencies only point backwards, so a
prefix is itself a valid program) and its per-instruction time is extrapolated to the full size;
the output says so. Last line: RESULT instr_per_s=<n> speedup_vs_python=<x>."""

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
from neuron_sim.timing import reference as ref  # noqa: E402
from neuron_sim.timing.simulate import kernel_args  # noqa: E402


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
    prog = make_program(args.n)
    print(f"program: {len(prog):,} instructions built from columns in "
          f"{time.perf_counter() - t:.2f} s; counts {prog.counts()}")
    ns.simulate(make_program(1000))     # compile/load in this process before timing
    best = np.inf
    for _ in range(3):
        t = time.perf_counter()
        res = ns.simulate(prog)
        best = min(best, time.perf_counter() - t)
    rate = len(prog) / best
    print(f"numba: {len(prog):,} instructions in {best:.3f} s -> {rate / 1e6:.2f} M instr/s "
          f"(simulated device time {res.total_ns / 1e6:.3f} ms)")

    small = make_program(args.python_n)
    a = kernel_args(small, small.chip)
    t = time.perf_counter()
    status, *_ = ref.schedule(*a)
    py = time.perf_counter() - t
    assert status == 0
    py_rate = len(small) / py
    print(f"python loop (same model, timing/reference.py): {len(small):,}-instruction prefix in "
          f"{py:.2f} s -> {py_rate / 1e3:.1f} k instr/s; extrapolated to {len(prog):,}: "
          f"{len(prog) / py_rate:.1f} s")
    fast_prefix = ns.simulate(small)
    same = np.array_equal(fast_prefix.end_ns, np.asarray(ref.schedule(*a)[2]))
    print(f"numba and python agree on the prefix: {same}")
    print(f"RESULT instr_per_s={rate:.0f} speedup_vs_python={rate / py_rate:.1f}")


if __name__ == "__main__":
    main()
