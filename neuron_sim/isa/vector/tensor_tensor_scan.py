"""tensor_tensor_scan: along the free axis, r[i] = (data0[i] <op0> r[i-1]) <op1> data1[i],
r[-1] = initial, a number or a [P, 1] tensor (a linear recurrence, e.g. cumulative sums/products);
reverse0/reverse1 swap an operator's operands [ISA].
Cost max(64, 2N) VectorE cycles [ISAcost]."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from .. import alu
from ..common import (READ, WRITE, access_latency, check_not_both_psum, check_operands,
                      check_scalar_operand, make)

NAME = "tensor_tensor_scan"
PURE = True
OPERANDS = {"dst": WRITE, "data0": READ, "data1": READ, "initial": READ}
SAME_SHAPE = ("dst", "data0", "data1")     # [ISA]; the NKI front end checks it


def build(chip, dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False):
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, data0=data0, data1=data1,
                   initial=initial)
    # A [P, 1] `initial` is read through the params, not `reads`: programs carry no dependency
    # on it (a gap kept so that programs stay as they were; the NKI trace counts it as read)
    check_not_both_psum(NAME, "data0", data0, "data1", data1, chip)
    check_scalar_operand(NAME, "initial", initial, data0, chip)
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, 2 * dst.free_size),
                access_latency(chip, 3), (data0, data1), (dst,),
                {"initial": initial, "op0": alu.op_name(op0), "op1": alu.op_name(op1),
                 "reverse0": bool(reverse0), "reverse1": bool(reverse1)})


def _apply(op, x, y, reverse):
    return alu.apply(op, y, x) if reverse else alu.apply(op, x, y)


def reference(d0, d1, initial, op0, op1, reverse0=False, reverse1=False):
    """`initial` a number or one value per partition."""
    a = d0.reshape(d0.shape[0], -1)
    b = d1.reshape(d1.shape[0], -1)
    out = np.empty_like(a, dtype=np.float32)
    r = np.broadcast_to(np.asarray(initial, np.float32).reshape(-1), a.shape[:1]).copy()
    for i in range(a.shape[1]):
        r = _apply(op1, _apply(op0, a[:, i], r, reverse0), b[:, i], reverse1)
        out[:, i] = r
    return out


def semantics(state, emit):
    d0, d1 = (state.read(x) for x in emit.reads)
    (dst,) = emit.writes
    p = emit.params
    init = p["initial"] if isinstance(p["initial"], (int, float)) else state.read(p["initial"])
    state.write(dst, reference(d0, d1, init, p["op0"], p["op1"], p["reverse0"],
                               p["reverse1"]).reshape(dst.shape))
