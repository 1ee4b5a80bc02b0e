"""iota (GpSimd): dst[p, i0, i1, ...] = base + channel_multiplier * p + sum(step_d * i_d).
Cost 150 + N GpSimd cycles [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ..common import access_latency, check_engine_operand, make

NAME = "iota"


def build(chip, dst, base, channel_multiplier, pattern):
    check_engine_operand(NAME, "dst", dst, Engine.GPSIMD, chip)
    steps = tuple(s for s, _ in pattern)
    return make(NAME, Engine.GPSIMD, chip.gpsimd_start_cycles + dst.free_size,
                access_latency(chip, 1), (), (dst,),
                {"base": base, "cm": channel_multiplier, "steps": steps})


def reference(shape, base, cm, steps):
    p = np.arange(shape[0]).reshape((-1,) + (1,) * (len(shape) - 1))
    out = base + cm * p + np.zeros(shape)
    for d, step in enumerate(steps[: len(shape) - 1]):
        idx = np.arange(shape[d + 1]).reshape((1,) * (d + 1) + (-1,) + (1,) * (len(shape) - d - 2))
        out = out + step * idx
    return out.astype(np.float32)


def semantics(state, emit):
    (dst,) = emit.writes
    p = emit.params
    state.write(dst, reference(dst.shape, p["base"], p["cm"], p["steps"]))
