"""bn_aggr: combine bn_stats chunks [P, 6*k] into (mean, variance) [P, 2].
Cost max(64, 13*N/3) VectorE cycles [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ..common import access_latency, check_engine_operand, make

NAME = "bn_aggr"


def build(chip, dst, data):
    check_engine_operand(NAME, "data", data, Engine.VECTOR, chip)
    check_engine_operand(NAME, "dst", dst, Engine.VECTOR, chip)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, 13 * data.free_size / 3),
                access_latency(chip, 2), (data,), (dst,))


def reference(stats):
    s = stats.reshape(stats.shape[0], -1, 6).astype(np.float64)
    mean, var, cnt = s[..., 0], s[..., 1], s[..., 2]
    total = cnt.sum(axis=1)
    m = (mean * cnt).sum(axis=1) / total
    v = ((var + (mean - m[:, None]) ** 2) * cnt).sum(axis=1) / total
    return np.stack([m, v], axis=1).astype(np.float32)


def semantics(state, emit):
    (data,), (dst,) = emit.reads, emit.writes
    state.write(dst, reference(state.read(data)).reshape(dst.shape))
