"""local_gather (GpSimd): within each group of 16 partitions (one GpSimd core), dst[p, i] =
src[index[p, i]] over the group's elements. Simplified here to a per-partition gather along the
free axis. Cost 150 + (num_idx * e) / C with C = ((28 + 4e) / (4e)) / min(4 / dtype_bytes, e),
e = elements per index (1 here) [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ...numerics.formats import itemsize
from ..common import READ, WRITE, access_latency, check_operands, make, semantics_of

NAME = "local_gather"
OPERANDS = {"dst": WRITE, "src": READ, "index": READ}


def build(chip, dst, src, index):
    check_operands(NAME, chip, Engine.GPSIMD, dst=dst, src=src, index=index)
    e = 1
    c_div = ((28 + 4 * e) / (4 * e)) / min(4 / itemsize(src.dtype), e)
    cycles = chip.gpsimd_start_cycles + index.free_size * e / c_div
    return make(NAME, Engine.GPSIMD, cycles, access_latency(chip, 3), (src, index), (dst,))


def reference(src, index):
    s = src.reshape(src.shape[0], -1)
    i = index.reshape(index.shape[0], -1).astype(np.int64)
    return np.take_along_axis(s, np.clip(i, 0, s.shape[1] - 1), axis=1)


semantics = semantics_of(reference)
