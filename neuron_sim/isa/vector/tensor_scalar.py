"""tensor_scalar: dst = (data <op0> operand0) <op1> operand1, operands scalars or per-partition
[P, 1] vectors. VectorE, GpSimd, and ScalarE on NC-v4.

Cost [ISAcost][ArchV3][ArchV4]: max(64, N); NC-v3+ VectorE BF16/FP16: N/4 (SBUF, contiguous) or
N/2 (non-contiguous or PSUM); NC-v4 ScalarE: 2x for BF16/FP16; GpSimd: 150 + N."""

from __future__ import annotations

from ...engines import Engine
from ...errors import CapabilityError, LegalityError
from .. import alu
from ..common import (READ, WRITE, access_latency, check_operands, check_scalar_operand, make,
                      one_input_engine_cycles, per_partition)

NAME = "tensor_scalar"
PURE = True
OPERANDS = {"dst": WRITE, "data": READ, "operand0": READ, "operand1": READ}


# operands of one shape [ISA]: the NKI front end checks it
SAME_SHAPE = ("dst", "data")


def build(chip, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
          engine=Engine.VECTOR):
    if engine == Engine.SCALAR and not chip.has_scalar_tensor_scalar:
        raise CapabilityError(NAME, "engine", "VectorE or GpSimd (ScalarE runs tensor_scalar from "
                              "NC-v4)", "ScalarE", chip.name)
    check_operands(NAME, chip, engine, dst=dst, data=data, operand0=operand0,
                   operand1=operand1)
    reads = [data]
    for nm, o in (("operand0", operand0), ("operand1", operand1)):
        if o is not None and check_scalar_operand(NAME, nm, o, data, chip):
            reads.append(o)
    alu.binary(op0)
    if op1 is not None:
        alu.binary(op1)
        if (alu.op_name(op0) in alu.BITVEC) != (alu.op_name(op1) in alu.BITVEC):
            raise LegalityError(NAME, "op1", "an operator of op0's kind (both bit-vector or both "
                                "arithmetic)", alu.op_name(op1), chip.name,
                                "split it into two instructions")
    return make(NAME, engine, one_input_engine_cycles(chip, dst, data, engine),
                access_latency(chip, 2), reads, (dst,),
                {"op0": alu.op_name(op0), "operand0": operand0,
                 "op1": None if op1 is None else alu.op_name(op1), "operand1": operand1,
                 "reverse0": bool(reverse0), "reverse1": bool(reverse1)})


def _apply(op, x, s, reverse=False):
    """x <op> s (s <op> x reversed): FP32, or a bit-vector operator on the integer values."""
    a, b = (s, x) if reverse else (x, s)
    return alu.binary(op)(a, b) if alu.op_name(op) in alu.BITVEC else alu.apply(op, a, b)


def reference(x, op0, s0, op1=None, s1=None, reverse0=False, reverse1=False):
    y = _apply(op0, x, s0, reverse0)
    return y if op1 is None else _apply(op1, y, s1, reverse1)


def semantics(state, emit):
    data = emit.reads[0]
    (dst,) = emit.writes
    p = emit.params
    x = state.read_raw(data) if p["op0"] in alu.BITVEC else state.read(data)
    s0 = per_partition(state, p["operand0"], p["operand0"], x)
    s1 = None if p["op1"] is None else per_partition(state, p["operand1"], p["operand1"], x)
    state.write(dst, reference(x, p["op0"], s0, p["op1"], s1, p["reverse0"],
                               p["reverse1"]).reshape(dst.shape))
