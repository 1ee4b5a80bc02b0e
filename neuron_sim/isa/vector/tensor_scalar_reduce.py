"""tensor_scalar_reduce: dst = data <op0> operand0 (as tensor_scalar with one operator), and the
reduction of dst along the free axis into reduce_res [P, 1], on VectorE [ISA].

Cost [ISAcost] `tensor_scalar_reduce`: max(64, N) + 64 VectorE cycles (the extra 64 read the
accumulator out)."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from .. import alu
from ..common import (access_latency, check_engine_operand, check_same_partitions, make,
                      one_input_cycles, stride_factor)
from .tensor_scalar import reference as _tensor_scalar

NAME = "tensor_scalar_reduce"


def build(chip, dst, data, op0, operand0, reduce_op, reduce_res):
    alu.binary(op0)
    alu.reduce(reduce_op)
    for nm, ap in (("dst", dst), ("data", data), ("reduce_res", reduce_res)):
        check_engine_operand(NAME, nm, ap, Engine.VECTOR, chip)
    check_same_partitions(NAME, "dst", dst, "data", data, chip)
    reads = [data]
    if not isinstance(operand0, (int, float)):
        check_engine_operand(NAME, "operand0", operand0, Engine.VECTOR, chip)
        reads.append(operand0)
    c = one_input_cycles(chip, data.free_size) * stride_factor(dst, data) + chip.min_ii_cycles
    return make(NAME, Engine.VECTOR, c, access_latency(chip, 2 + len(reads)), reads, (dst, reduce_res),
                {"op0": alu.op_name(op0), "operand0": operand0,
                 "reduce_op": alu.op_name(reduce_op)})


def reference(x, op0, s0, reduce_op):
    """(dst, the row reductions of dst) on FP32 values."""
    y = _tensor_scalar(x, op0, s0)
    return y, np.asarray(alu.reduce(reduce_op)(y.reshape(y.shape[0], -1), axis=1), np.float32)


def semantics(state, emit):
    x = state.read(emit.reads[0])
    p = emit.params
    s0 = p["operand0"]
    if not isinstance(s0, (int, float)):
        s0 = state.read(emit.reads[1]).reshape((x.shape[0],) + (1,) * (x.ndim - 1))
    dst, res = emit.writes
    y, r = reference(x, p["op0"], s0, p["reduce_op"])
    state.write(dst, y.reshape(dst.shape))
    state.write(res, r.reshape(res.shape))
