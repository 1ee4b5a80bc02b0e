"""How fast a kernel of ~100k instructions traces and simulates.

    python examples/nki/trace_speed.py [--n 100000] [--only chain|matmul_c1]

Two kernels: a chain of small VectorE/ScalarE instructions on one tile (numerics on), and the
matmul tutorial's first stage at full size (~99k instructions, timing only). Prints wall and CPU
seconds for tracing, program building and timing. The last line is ``RESULT key=value ...``.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nki                      # noqa: E402
import nki.isa as nisa          # noqa: E402
import nki.language as nl       # noqa: E402
import matmul_tutorial as mt    # noqa: E402
from neuron_sim.nki import launch, program   # noqa: E402


@nki.jit(platform_target="trn2")
def chain_kernel(x, n):
    t = nl.load(x)
    u = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.sbuf)
    for i in range(n // 2):
        nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=1.0001, op1=nl.add, operand1=0.5)
        nisa.activation(dst=t, op=nl.copy, data=u, scale=0.5)
    out = nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def timed(fn):
    cpu = {}
    orig_build = program.build_programs

    def build(*a, **k):
        t = time.process_time()
        r = orig_build(*a, **k)
        cpu["build"] = time.process_time() - t
        return r

    program.build_programs = build
    try:
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall, total = time.perf_counter() - w, time.process_time() - c
    finally:
        program.build_programs = orig_build
    rep = launch.last_report()
    return rep, wall, total, cpu.get("build", 0.0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--only", choices=("chain", "matmul_c1"), help="run one of the two kernels")
    args = ap.parse_args(argv)
    nki.simulate(chain_kernel)(np.ones((128, 64), np.float32), 10)          # warm the numba kernel
    results = {}
    runs = {
        "chain": lambda: nki.simulate(chain_kernel)(np.ones((128, 64), np.float32), args.n),
        "matmul_c1": lambda: nki.simulate(mt.matmul_tiled, platform_target="trn1", numerics=False)(
            np.zeros((8192, 4096), nl.bfloat16), np.zeros((8192, 8192), nl.bfloat16)),
    }
    for name, fn in runs.items():
        if args.only not in (None, name):
            continue
        rep, wall, total, build = timed(fn)
        print(f"{name}: {rep.instructions} instructions ({rep.program_rows} program rows): wall {wall:.2f} s, "
              f"CPU {total:.2f} s (trace+plan {total - build:.2f} s, build+time {build:.2f} s); "
              f"simulated {rep.total_us:,.1f} us")
        results[f"{name}_instructions"] = rep.instructions
        results[f"{name}_cpu_s"] = round(total, 2)
        results[f"{name}_wall_s"] = round(wall, 2)
    print("RESULT " + " ".join(f"{k}={v}" for k, v in results.items()))


if __name__ == "__main__":
    main()
