"""max8: dst[P, 8] = the 8 largest values of each partition of src, in descending order, on VectorE.
src holds 8 to 16,384 elements per partition [ISA] (chip.max8_free_elems_min/max).
Cost: N VectorE cycles [ISAcost] `max8`, never below MIN_II (every VectorE instruction
[ISAcost])."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ...errors import FreeSizeError
from ..common import READ, WRITE, access_latency, check_operands, make, semantics_of, stride_factor

NAME = "max8"
PURE = True
OPERANDS = {"dst": WRITE, "src": READ}


def build(chip, dst, src):
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, src=src)
    n, lo, hi = src.free_size, chip.max8_free_elems_min, chip.max8_free_elems_max
    if not lo <= n <= hi:
        raise FreeSizeError(NAME, "src", f"{lo} to {hi} elements per partition", n, chip.name)
    if dst.p_size != src.p_size or dst.free_size != 8:
        raise FreeSizeError(NAME, "dst", f"shape [{src.p_size}, 8]", list(dst.shape), chip.name)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, n) * stride_factor(chip, dst, src),
                access_latency(chip, 2), (src,), (dst,))


def reference(x):
    x = x.reshape(x.shape[0], -1).astype(np.float32)
    return -np.sort(-x, axis=1)[:, :8]


semantics = semantics_of(reference)
