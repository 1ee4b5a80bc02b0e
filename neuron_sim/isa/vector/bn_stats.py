"""bn_stats: per-partition statistics of up to chip.bn_stats_free_elems_max (512) elements.

Output [P, 6] per call: (count, mean, count * variance) of the even and of the odd elements, the
layout bn_aggr consumes here; the hardware's exact 6-value layout is not documented.
Cost max(64, N) [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ...errors import FreeSizeError
from ..common import READ, WRITE, access_latency, check_operands, make, semantics_of

NAME = "bn_stats"
OPERANDS = {"dst": WRITE, "data": READ}


def build(chip, dst, data):
    check_operands(NAME, chip, Engine.VECTOR, data=data, dst=dst)
    fmax = chip.bn_stats_free_elems_max
    if data.free_size > fmax:
        raise FreeSizeError(NAME, "data", f"at most {fmax} elements per partition "
                            "(nl.tile_size.bn_stats_fmax)", data.free_size, chip.name,
                            f"call it per {fmax}-element chunk and bn_aggr the results")
    if dst.p_size != data.p_size or dst.free_size != 6:
        raise FreeSizeError(NAME, "dst", f"shape [{data.p_size}, 6]", list(dst.shape), chip.name)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, data.free_size),
                access_latency(chip, 2), (data,), (dst,))


def reference(x):
    """(count, mean, count * variance) of the even and of the odd elements of each partition, in
    FP32: six values that bn_aggr combines."""
    x = x.reshape(x.shape[0], -1).astype(np.float32)
    cols = []
    for half in (x[:, 0::2], x[:, 1::2]):
        n = half.shape[1]
        mean = half.mean(axis=1) if n else np.zeros(x.shape[0], np.float32)
        m2 = ((half - mean[:, None]) ** 2).sum(axis=1) if n else np.zeros(x.shape[0], np.float32)
        cols += [np.full(x.shape[0], n, np.float32), mean, m2]
    return np.stack(cols, axis=1)


semantics = semantics_of(reference)
