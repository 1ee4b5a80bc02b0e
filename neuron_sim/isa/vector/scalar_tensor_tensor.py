"""scalar_tensor_tensor: dst = (data <op0> operand0) <op1> operand1 on VectorE; operand0 is a
scalar or a [P, 1] tensor, operand1 a tile shaped like data; reverse0/reverse1 swap the operands
of op0/op1 [ISA].

Cost (VectorE cycles) [ISAcost] `scalar_tensor_tensor`: 2N (two input streams, as tensor_tensor);
N when data and operand1 are both BF16, op0 = subtract, op1 = multiply and N is even; max(64, N)
when one of data/operand1 is in PSUM and the other in SBUF (the two-input rule of tensor_tensor
[ISAcost]). Never below MIN_II."""

from __future__ import annotations

from ...engines import Engine
from ...errors import MemoryAccessError
from ...program.ap import Memory
from .. import alu
from ..common import (access_latency, check_engine_operand, check_same_shape,
                      check_scalar_operand, make, stride_factor)

NAME = "scalar_tensor_tensor"
PURE = True


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
    for nm, ap in (("dst", dst), ("data", data), ("operand1", operand1)):
        check_engine_operand(NAME, nm, ap, Engine.VECTOR, chip)
    check_same_shape(NAME, "dst", dst, "data", data, chip)
    check_same_shape(NAME, "data", data, "operand1", operand1, chip)
    if data.memory == operand1.memory == Memory.PSUM:
        raise MemoryAccessError(NAME, "operand1", "data and operand1 not both in PSUM",
                                "both in PSUM", chip.name, "copy one of them to SBUF first")
    reads = [data, operand1]
    if check_scalar_operand(NAME, "operand0", operand0, data, Engine.VECTOR, chip):
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
    s0 = p["operand0"]
    if not isinstance(s0, (int, float)):
        s0 = state.read(emit.reads[2]).reshape((x.shape[0],) + (1,) * (x.ndim - 1))
    (dst,) = emit.writes
    y = state.read(operand1).reshape(x.shape)
    state.write(dst, reference(x, p["op0"], s0, p["op1"], y, p["reverse0"],
                               p["reverse1"]).reshape(dst.shape))
