"""Run NumPy's BLAS single-threaded while kernels compute.

A kernel's numerics are thousands of small matmuls (at most 128 x 128 x 512): threading them
costs more than it gains, and on a shared machine OpenBLAS's spinning threads made traced
matmuls ~10x slower (measured: 0.81 s vs 0.08 s for 256 tile matmuls on 2 busy cores).
``OPENBLAS_NUM_THREADS`` set by the user wins; otherwise we ask the loaded OpenBLAS for one thread.
"""

from __future__ import annotations

import ctypes
import os

_done = False


def single_thread() -> None:
    global _done
    already, _done = _done, True
    if already or os.environ.get("OPENBLAS_NUM_THREADS"):
        return
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()
                     and (line.rstrip().endswith(".so") or ".so." in line)}
    except OSError:
        return
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
        except OSError:
            continue
        for sym in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                    "openblas_set_num_threads"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn(ctypes.c_int(1))
                return
