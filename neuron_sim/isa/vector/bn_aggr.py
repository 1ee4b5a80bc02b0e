"""bn_aggr: combine bn_stats chunks [P, 6*k] into (mean, variance) [P, 2].
Cost max(64, 13*N/3) VectorE cycles [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ...errors import FreeSizeError
from ..common import READ, WRITE, access_latency, check_operands, make, semantics_of

NAME = "bn_aggr"
OPERANDS = {"dst": WRITE, "data": READ}


def build(chip, dst, data):
    check_operands(NAME, chip, Engine.VECTOR, data=data, dst=dst)
    if data.free_size % 3:
        raise FreeSizeError(NAME, "data", "(count, mean, count * variance) triples: a multiple "
                            "of 3 elements per partition", data.free_size, chip.name)
    if dst.p_size != data.p_size or dst.free_size != 2:
        raise FreeSizeError(NAME, "dst", f"shape [{data.p_size}, 2]", list(dst.shape), chip.name)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, 13 * data.free_size / 3),
                access_latency(chip, 2), (data,), (dst,))


def reference(stats):
    """(mean, variance) per partition from bn_stats' (count, mean, count * variance) triples."""
    t = stats.reshape(stats.shape[0], -1, 3).astype(np.float64)
    cnt, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
    total = cnt.sum(axis=1)
    gmean = (cnt * mean).sum(axis=1) / np.maximum(total, 1)
    gm2 = (m2 + cnt * (mean - gmean[:, None]) ** 2).sum(axis=1)
    return np.stack([gmean, gm2 / np.maximum(total, 1)], axis=1).astype(np.float32)


semantics = semantics_of(reference)
