"""iota (GpSimd): dst[p, j] = offset + channel_multiplier * p + the value of free element j
under `pattern`, NKI's (step, count) pairs, outermost first, flattened over dst's free elements
(a count of None: as many as are left). Cost 150 + N GpSimd cycles [ISAcost]."""

from __future__ import annotations

import math

import numpy as np

from ...engines import Engine
from ...errors import FreeSizeError
from ..common import WRITE, access_latency, check_operands, make

NAME = "iota"
OPERANDS = {"dst": WRITE}


def check_pattern(instr, pattern, dst, chip) -> tuple:
    """The pattern as ((step, count), ...) of Python ints; its counts must cover dst's free size."""
    pat = tuple((int(s), None if n is None else int(n)) for s, n in pattern)
    if all(n is not None for _, n in pat) and math.prod(n for _, n in pat) != dst.free_size:
        raise FreeSizeError(instr, "pattern", f"{dst.free_size} elements per partition like dst",
                            math.prod(n for _, n in pat), chip.name,
                            "make the counts' product dst's free size")
    return pat


def build(chip, dst, pattern, offset=0, channel_multiplier=0):
    check_operands(NAME, chip, Engine.GPSIMD, dst=dst)
    return make(NAME, Engine.GPSIMD, chip.gpsimd_start_cycles + dst.free_size,
                access_latency(chip, 1), (), (dst,),
                {"offset": int(offset), "cm": int(channel_multiplier),
                 "pattern": check_pattern(NAME, pattern, dst, chip)})


def reference(partitions, free, offset, cm, pattern):
    """(partitions, free) exact integers (int64)."""
    v = np.zeros(1, np.int64)
    for step, n in pattern:
        n = max(free // len(v), 1) if n is None else n
        v = (v[:, None] + step * np.arange(n, dtype=np.int64)[None, :]).reshape(-1)
    return offset + cm * np.arange(partitions, dtype=np.int64)[:, None] + v[None, :free]


def semantics(state, emit):
    (dst,) = emit.writes
    p = emit.params
    state.write(dst, reference(dst.p_size, dst.free_size, p["offset"], p["cm"],
                               p["pattern"]).reshape(dst.shape))
