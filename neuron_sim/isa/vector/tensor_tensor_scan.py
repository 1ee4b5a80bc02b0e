"""tensor_tensor_scan: along the free axis, r[i] = (data0[i] <op0> r[i-1]) <op1> data1[i],
r[-1] = initial (a linear recurrence, e.g. cumulative sums/products).
Cost max(64, 2N) VectorE cycles [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from .. import alu
from ..common import access_latency, check_engine_operand, make

NAME = "tensor_tensor_scan"


def build(chip, dst, d0, d1, initial, op0, op1):
    for nm, ap in (("dst", dst), ("data0", d0), ("data1", d1)):
        check_engine_operand(NAME, nm, ap, Engine.VECTOR, chip)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, 2 * dst.free_size),
                access_latency(chip, 3), (d0, d1), (dst,),
                {"initial": initial, "op0": alu.op_name(op0), "op1": alu.op_name(op1)})


def reference(d0, d1, initial, op0, op1):
    a = d0.reshape(d0.shape[0], -1)
    b = d1.reshape(d1.shape[0], -1)
    out = np.empty_like(a, dtype=np.float32)
    r = np.full(a.shape[0], initial, np.float32)
    for i in range(a.shape[1]):
        r = alu.apply(op1, alu.apply(op0, a[:, i], r), b[:, i])
        out[:, i] = r
    return out


def semantics(state, emit):
    d0, d1 = (state.read(x) for x in emit.reads)
    (dst,) = emit.writes
    p = emit.params
    state.write(dst, reference(d0, d1, p["initial"], p["op0"], p["op1"]).reshape(dst.shape))
