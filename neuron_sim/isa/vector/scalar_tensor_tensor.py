"""scalar_tensor_tensor: dst = (data <op0> operand0) <op1> operand1 on VectorE; operand0 is a
scalar or a [P, 1] tensor, operand1 a tile shaped like data; reverse0/reverse1 swap the operands
of op0/op1 [ISA].

Cost (VectorE cycles) [ISAcost] `scalar_tensor_tensor`: 2N (two input streams, as tensor_tensor);
N when data and operand1 are both BF16, op0 = subtract, op1 = multiply and N is even; max(64, N)
when one of data/operand1 is in PSUM and the other in SBUF (the two-input rule of tensor_tensor
[ISAcost]). Never below MIN_II."""

from __future__ import annotations

from ...engines import Engine
from ...program.ap import Memory
from .. import alu
from ..common import (READ, WRITE, access_latency, check_not_both_psum, check_operands,
                      check_same_shape, check_scalar_operand, make, per_partition,
                      stride_factor)

NAME = "scalar_tensor_tensor"
PURE = True
OPERANDS = {"dst": WRITE, "data": READ, "operand0": READ, "operand1": READ}


def cost_cycles(chip, dst, data, operand1, op0, op1):
    n = data.free_size
    per_elem = 2
    if (data.memory == Memory.PSUM) != (operand1.memory == Memory.PSUM):
        per_elem = 1
    if (data.dtype == operand1.dtype == "bfloat16" and n % 2 == 0
            and (alu.op_name(op0), alu.op_name(op1)) == ("subtract", "multiply")):
        per_elem = 1
    return max(chip.min_ii_cycles, per_elem * n) * stride_factor(chip, dst, data, operand1)


def build(chip, dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False):
    alu.binary(op0)
    alu.binary(op1)
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, data=data, operand0=operand0,
                   operand1=operand1)
    check_same_shape(NAME, "dst", dst, "data", data, chip)
    check_same_shape(NAME, "data", data, "operand1", operand1, chip)
    check_not_both_psum(NAME, "data", data, "operand1", operand1, chip)
    reads = [data, operand1]
    if check_scalar_operand(NAME, "operand0", operand0, data, chip):
        reads.append(operand0)
    return make(NAME, Engine.VECTOR, cost_cycles(chip, dst, data, operand1, op0, op1),
                access_latency(chip, 1 + len(reads)), reads, (dst,),
                {"op0": alu.op_name(op0), "operand0": operand0, "op1": alu.op_name(op1),
                 "reverse0": bool(reverse0), "reverse1": bool(reverse1)})


def reference(x, op0, s0, op1, y, reverse0=False, reverse1=False):
    t = alu.apply(op0, *((s0, x) if reverse0 else (x, s0)))
    return alu.apply(op1, *((y, t) if reverse1 else (t, y)))


def semantics(state, emit):
    data, operand1 = emit.reads[:2]
    x = state.read(data)
    p = emit.params
    s0 = per_partition(state, p["operand0"], emit.reads[-1], x)
    (dst,) = emit.writes
    y = state.read(operand1).reshape(x.shape)
    state.write(dst, reference(x, p["op0"], s0, p["op1"], y, p["reverse0"],
                               p["reverse1"]).reshape(dst.shape))
