"""tensor_scalar_reduce: dst = data <op0> operand0 (as tensor_scalar with one operator; reverse0
swaps the operands), and the reduction of dst along the free axis folded into VectorE's
accumulator registers by reduce_cmd (default: reset, then reduce), read out to reduce_res [P, 1]
[ISA].

Cost [ISAcost] `tensor_scalar_reduce`: max(64, N) + 64 VectorE cycles (the extra 64 read the
accumulator out)."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from .. import alu
from ..common import (READ, WRITE, access_latency, check_operands, check_same_partitions,
                      make, one_input_cycles, per_partition, stride_factor)

NAME = "tensor_scalar_reduce"
OPERANDS = {"dst": WRITE, "data": READ, "operand0": READ, "reduce_res": WRITE}


def build(chip, dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False,
          reduce_cmd="reset_reduce", reduce_init=None):
    alu.binary(op0)
    alu.reduce(reduce_op)
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, data=data, operand0=operand0,
                   reduce_res=reduce_res)
    check_same_partitions(NAME, "dst", dst, "data", data, chip)
    reads = [data]
    if not isinstance(operand0, (int, float)):
        reads.append(operand0)
    c = one_input_cycles(chip, data.free_size) * stride_factor(chip, dst, data) + chip.min_ii_cycles
    return make(NAME, Engine.VECTOR, c, access_latency(chip, 2 + len(reads)), reads,
                (dst, reduce_res),
                {"op0": alu.op_name(op0), "operand0": operand0, "reduce_op": alu.op_name(reduce_op),
                 "reverse0": bool(reverse0), "reduce_cmd": getattr(reduce_cmd, "value", reduce_cmd),
                 "reduce_init": reduce_init})


def reference(x, op0, s0, reduce_op, reverse0=False):
    """(dst, the row reductions of dst) on FP32 values."""
    y = alu.apply(op0, *((s0, x) if reverse0 else (x, s0)))
    return y, np.asarray(alu.reduce(reduce_op)(y.reshape(y.shape[0], -1), axis=1), np.float32)


def semantics(state, emit):
    x = state.read(emit.reads[0])
    p = emit.params
    s0 = per_partition(state, p["operand0"], emit.reads[-1], x)
    dst, res = emit.writes
    y, r = reference(x, p["op0"], s0, p["reduce_op"], p["reverse0"])
    regs = alu.accumulate(state.accumulator(Engine.VECTOR), x.shape[0], r, p["reduce_cmd"],
                          p["reduce_op"], p["reduce_init"])
    state.write(dst, y.reshape(dst.shape))
    state.write(res, regs.reshape(res.shape))
