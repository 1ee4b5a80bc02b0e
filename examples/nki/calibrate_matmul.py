"""Calibration through kernels: simulated vs published times of the matmul tutorial stages.

    python examples/nki/calibrate_matmul.py            # the scaled shapes the tests use (~5 s)
    python examples/nki/calibrate_matmul.py --full     # [4096,8192]@[8192,8192] (~40 s)

Published: C1-C4 on Trn1 (BF16, latency and HFU), C8 on Trn2 (FP32, TensorE active time and HFU;
its traffic and VectorE rows are printed after the table), from ../shared/calibration/public.json. See
tests/nki/test_nki_calibration.py for why the scaled shapes are faithful. The last line is
``RESULT key=value ...``.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nki                      # noqa: E402
import nki.language as nl       # noqa: E402
import matmul_tutorial as mt    # noqa: E402

K, M, N = 8192, 4096, 8192
CASES = [  # id, kernel, target, dtype, published ms, published HFU %, scaled (m, n)
    ("C1", mt.matmul_tiled, "trn1", nl.bfloat16, 51.80, 10.98, (M // 8, N)),
    ("C2", mt.matmul_hoist_load, "trn1", nl.bfloat16, 42.96, 13.24, (M // 8, N)),
    ("C3", mt.matmul_block_free, "trn1", nl.bfloat16, 22.07, 26.51, (M // 8, N)),
    ("C4", mt.matmul_fully_optimized, "trn1", nl.bfloat16, 6.97, 85.24, (M, N // 8)),
    ("C8", mt.matmul_kopt_v5, "trn2", nl.float32, 28.16, 24.7, (M, N // 8)),
]
# C8's other published rows: (name, published, simulated from the report and the scale factor)
C8_ROWS = [
    ("tensor_active_percent", 99.5, lambda rep, f: rep.engine_active_percent["TensorE"]),
    ("dma_active_ms", 6.1, lambda rep, f: rep.engine_busy_ns["DMA"] * f / 1e6),
    ("dma_active_percent", 21.54, lambda rep, f: rep.engine_active_percent["DMA"]),
    ("mbu_percent", 8.96, lambda rep, f: rep.mbu_percent),
    ("vector_active_percent", 10.55, lambda rep, f: rep.engine_active_percent["VectorE"]),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="run the published shape")
    args = ap.parse_args(argv)
    results, c8 = {}, None
    print(f"{'case':5} {'target':6} {'shape':>16} {'simulated ms':>13} {'published ms':>13} {'error':>7} "
          f"{'HFU %':>6} {'pub. HFU':>8} {'error':>7} {'wall s':>7}")
    for cid, kern, target, dt, pub, pub_hfu, (m, n) in CASES:
        if args.full:
            m, n = M, N
        factor = (M * N) / (m * n)
        t0 = time.perf_counter()
        nki.simulate(kern, platform_target=target, numerics=False)(np.zeros((K, m), dt), np.zeros((K, n), dt))
        rep = nki.last_report()
        wall = time.perf_counter() - t0
        ms = rep.total_ms * factor
        if cid == "C8":   # published as TensorE active time
            ms = rep.engine_busy_ns["TensorE"] * factor / 1e6
            c8 = (rep, factor)
        err = (ms - pub) / pub
        hfu_err = (rep.hfu_percent - pub_hfu) / pub_hfu      # FLOPs over time: needs no scaling
        results[cid] = err
        results[f"{cid}_hfu"] = hfu_err
        print(f"{cid:5} {target:6} {f'{m}x{n}':>16} {ms:13.2f} {pub:13.2f} {100 * err:+6.1f}% "
              f"{rep.hfu_percent:6.1f} {pub_hfu:8.2f} {100 * hfu_err:+6.1f}% {wall:7.1f}"
              + (f"   ({rep.instructions} instructions, {rep.spills} spills)" if args.full else ""))
    if c8:
        for name, pub, sim in C8_ROWS:
            v = sim(*c8)
            results[f"C8_{name}"] = (v - pub) / pub
            print(f"C8    {name:24} {v:10.2f} {pub:10.2f} {100 * (v - pub) / pub:+6.1f}%")
    print("RESULT " + " ".join(f"{k}_err_pct={100 * v:+.1f}" for k, v in results.items()))


if __name__ == "__main__":
    main()
