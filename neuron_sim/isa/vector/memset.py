"""memset: dst = value. Cost max(64, N); zero into BF16/FP16: max(64, N/2) [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ..common import WRITE, access_latency, check_operands, is16, make, one_input_cycles

NAME = "memset"
ENGINES = (Engine.VECTOR, Engine.GPSIMD)
OPERANDS = {"dst": WRITE}


def build(chip, dst, value, engine=Engine.VECTOR):
    check_operands(NAME, chip, engine, dst=dst)
    n = dst.free_size
    if engine == Engine.GPSIMD:
        c = chip.gpsimd_start_cycles + n
    else:
        c = one_input_cycles(chip, n, 2.0 if (value == 0 and is16(dst)) else 1.0)
    return make(NAME, engine, c, access_latency(chip, 1), (), (dst,), {"value": float(value)})


def reference(shape, value):
    return np.full(shape, value, np.float32)


def semantics(state, emit):
    (dst,) = emit.writes
    state.write(dst, reference(dst.shape, emit.params["value"]))
