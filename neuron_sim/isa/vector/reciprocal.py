"""reciprocal on VectorE: dst = 1 / data, exact FP32 division.
Cost max(64, 8N) VectorE cycles, ~8x slower than ScalarE's approximate one [ISAcost][Shared]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ..common import (READ, WRITE, access_latency, check_operands, check_same_shape, make,
                      semantics_of)

NAME = "reciprocal"
PURE = True
OPERANDS = {"dst": WRITE, "data": READ}


def build(chip, dst, data):
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, data=data)
    check_same_shape(NAME, "dst", dst, "data", data, chip)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, 8 * data.free_size),
                access_latency(chip, 2), (data,), (dst,))


def reference(x):
    with np.errstate(all="ignore"):
        return (np.float32(1.0) / x.astype(np.float32)).astype(np.float32)


semantics = semantics_of(reference)
