"""affine_select (GpSimd): dst = on_true_tile where (offset + channel_multiplier * p + the
pattern's value, as iota's) <cmp_op> 0, else on_false_value (e.g. causal masks); cmp_op defaults
to equal. Cost GPSIMD_START + N = 150 + N [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from .. import alu
from ..common import READ, WRITE, access_latency, check_operands, make
from .iota import check_pattern
from .iota import reference as iota_ref

NAME = "affine_select"
OPERANDS = {"dst": WRITE, "on_true_tile": READ}
SAME_SHAPE = ("dst", "on_true_tile")     # [ISA]; the NKI front end checks it


def build(chip, dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None,
          offset=0):
    check_operands(NAME, chip, Engine.GPSIMD, dst=dst, on_true_tile=on_true_tile)
    cmp = "equal" if cmp_op is None else alu.op_name(cmp_op)
    alu.binary(cmp)
    return make(NAME, Engine.GPSIMD, chip.gpsimd_start_cycles + dst.free_size,
                access_latency(chip, 2), (on_true_tile,), (dst,),
                {"false": float(on_false_value), "cm": int(channel_multiplier),
                 "pattern": check_pattern(NAME, pattern, dst, chip), "offset": int(offset),
                 "cmp": cmp})


def reference(x, false_value, cm, pattern, offset, cmp):
    """x: (partitions, free)."""
    expr = iota_ref(x.shape[0], x.shape[1], offset, cm, pattern)
    return np.where(alu.apply(cmp, expr, 0.0) != 0, x, np.float32(false_value)).astype(np.float32)


def semantics(state, emit):
    (src,), (dst,) = emit.reads, emit.writes
    p = emit.params
    x = state.read(src).reshape(dst.p_size, -1)
    state.write(dst, reference(x, p["false"], p["cm"], p["pattern"], p["offset"],
                               p["cmp"]).reshape(dst.shape))
