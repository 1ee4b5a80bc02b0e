"""ProgramBuilder throughput: build the big calibration programs (C8 kernel_opt_v5 on Trn2, 90k
instructions; C4 matmul_fully_blocked on Trn1, 88k; C1 matmul_tiled on Trn1 with M=512, 17k) and
report instructions built per second, with the share spent finding dependencies (the bulk pass
of `ProgramBuilder.build`, neuron_sim/kernels/deps.py).

`--check` also builds each program with the plain reference of the dependency rules (per
instruction, `ProgramBuilder._auto`, every new access checked against every live access of its
tensor with `_overlap` / `_covers`) and asserts the same dependencies and order edges.
Last line: RESULT instr_per_s=<n> auto_share=<fraction> cpu_instr_per_s=<n> (over the three
programs; instr_per_s is per wall second, issue 19's figure; cpu_instr_per_s per second of this
process's CPU, the one to compare on a loaded machine)."""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from neuron_sim.calibrate import programs as P  # noqa: E402
from neuron_sim.program import builder as B  # noqa: E402
from neuron_sim.progress import progress  # noqa: E402

PROGRAMS = {
    "C8 kernel_opt_v5 trn2": lambda: P.kernel_opt_v5("trn2"),
    "C4 matmul_fully_blocked trn1": lambda: P.matmul_fully_blocked("trn1"),
    "C1 matmul_tiled trn1 M=512": lambda: P.matmul_tiled("trn1", M=512),
}


def _timed_deps():
    """Wrap ProgramBuilder._bulk_deps to add up its wall time; returns (accumulator, undo)."""
    spent, orig = [0.0], B.ProgramBuilder._bulk_deps

    def _bulk_deps(self, *args):
        t = time.perf_counter()
        out = orig(self, *args)
        spent[0] += time.perf_counter() - t
        return out
    B.ProgramBuilder._bulk_deps = _bulk_deps
    return spent, lambda: setattr(B.ProgramBuilder, "_bulk_deps", orig)


def _reference_build(make):
    default = B._reference_default
    B._reference_default = lambda: True
    try:
        return make()
    finally:
        B._reference_default = default


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare every dependency list with the per-instruction reference (slow)")
    args = ap.parse_args(argv)
    n_total = t_total = auto_total = cpu_total = 0.0
    # loads the compiled kernels (cached on disk; ~10-70 ms each in a fresh process): the
    # dependency pass and the loop writer of repeat() (8 K steps: 5 written in bulk)
    P.matmul_tiled("trn1", M=128, K=1024, N=512)
    # the startup's objects (imports, numba's kernel loads) moved to the oldest generation: the
    # first collection of the middle one otherwise walks them inside a timed build (26-33 ms
    # CPU in C4's, a one-time cost of a fresh process, not of building)
    gc.collect()
    for name, make in progress(PROGRAMS.items(), "building programs", " programs"):
        spent, undo = _timed_deps()
        t, c = time.perf_counter(), time.process_time()
        prog = make()
        dt = time.perf_counter() - t
        cpu_total += time.process_time() - c
        undo()
        n_total, t_total, auto_total = n_total + len(prog), t_total + dt, auto_total + spent[0]
        print(f"{name:30s} {len(prog):7,} instr  build {dt:6.2f} s  deps {spent[0]:5.2f} s  "
              f"{len(prog) / dt / 1e3:6.1f} k instr/s")
        if args.check:
            t = time.perf_counter()
            ref = _reference_build(make)
            same = all(np.array_equal(x, y) for x, y in
                       [(prog.dep_ptr, ref.dep_ptr), (prog.dep_idx, ref.dep_idx),
                        *zip(prog.order_edges(), ref.order_edges())])
            print(f"  reference: build {time.perf_counter() - t:6.2f} s, "
                  f"same dependencies: {same}")
            assert same, name
    print(f"RESULT instr_per_s={n_total / t_total:.0f} auto_share={auto_total / t_total:.2f} "
          f"cpu_instr_per_s={n_total / cpu_total:.0f}")


if __name__ == "__main__":
    main()
