"""select: dst = predicate ? on_true : on_false. Cost max(64, N) VectorE cycles [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ..common import (READ, WRITE, access_latency, check_operands, check_same_shape, make,
                      semantics_of)

NAME = "select"
PURE = True
OPERANDS = {"dst": WRITE, "predicate": READ, "on_true": READ, "on_false": READ}


def build(chip, dst, predicate, on_true, on_false):
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, predicate=predicate, on_true=on_true,
                   on_false=on_false)
    for nm, ap in (("predicate", predicate), ("on_true", on_true), ("on_false", on_false)):
        check_same_shape(NAME, "dst", dst, nm, ap, chip)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, dst.free_size),
                access_latency(chip, 4), (predicate, on_true, on_false), (dst,))


def reference(pred, a, b):
    return np.where(pred != 0, a, b).astype(np.float32)


semantics = semantics_of(reference)
