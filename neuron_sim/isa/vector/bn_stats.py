"""bn_stats: per-partition statistics of up to 512 elements, for layer/batch norm.

Output [P, 6] per call: (mean, variance, count, 0, 0, 0) — the layout bn_aggr consumes here; the
hardware's exact 6-value layout is not documented. Cost max(64, N), N <= 512 [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ..common import access_latency, check_engine_operand, check_free, make

NAME = "bn_stats"
MAX_FREE = 512


def build(chip, dst, data):
    check_engine_operand(NAME, "data", data, Engine.VECTOR, chip)
    check_engine_operand(NAME, "dst", dst, Engine.VECTOR, chip)
    check_free(NAME, "data", data.free_size, MAX_FREE, chip, "bn_stats free size",
               "split into chunks of 512 and combine with bn_aggr")
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, data.free_size),
                access_latency(chip, 2), (data,), (dst,))


def reference(x):
    x2 = x.reshape(x.shape[0], -1).astype(np.float64)
    out = np.zeros((x2.shape[0], 6), np.float32)
    out[:, 0] = x2.mean(axis=1)
    out[:, 1] = x2.var(axis=1)
    out[:, 2] = x2.shape[1]
    return out


def semantics(state, emit):
    (data,), (dst,) = emit.reads, emit.writes
    state.write(dst, reference(state.read(data)).reshape(dst.shape))
