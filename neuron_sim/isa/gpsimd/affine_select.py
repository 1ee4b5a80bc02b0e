"""affine_select (GpSimd): dst = on_true where (offset + channel_multiplier*p + sum(step*i)) <cmp> 0,
else on_false_value (e.g. causal masks). Cost GPSIMD_START + N = 150 + N [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from .. import alu
from ..common import access_latency, check_engine_operand, make
from .iota import reference as iota_ref

NAME = "affine_select"


def build(chip, dst, on_true, on_false_value, cm, pattern, offset, cmp_op):
    check_engine_operand(NAME, "dst", dst, Engine.GPSIMD, chip)
    check_engine_operand(NAME, "on_true", on_true, Engine.GPSIMD, chip)
    alu.binary(cmp_op)
    return make(NAME, Engine.GPSIMD, chip.gpsimd_start_cycles + dst.free_size,
                access_latency(chip, 2), (on_true,), (dst,),
                {"false": on_false_value, "cm": cm, "steps": tuple(s for s, _ in pattern),
                 "offset": offset, "cmp": alu.op_name(cmp_op)})


def reference(x, false_value, cm, steps, offset, cmp):
    expr = iota_ref(x.shape, offset, cm, steps)
    return np.where(alu.apply(cmp, expr, 0.0) != 0, x, np.float32(false_value)).astype(np.float32)


def semantics(state, emit):
    (src,), (dst,) = emit.reads, emit.writes
    p = emit.params
    x = state.read(src).reshape(dst.shape)
    state.write(dst, reference(x, p["false"], p["cm"], p["steps"], p["offset"], p["cmp"]))
