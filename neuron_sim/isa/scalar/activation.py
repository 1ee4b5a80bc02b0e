"""activation / activation_reduce on ScalarE: dst = f(data * scale + bias), optionally reducing
the result along the free axis into reduce_res.

Cost (ScalarE cycles) [ISAcost][ArchV2]: max(64, N) for every function, scale and bias free;
activation_reduce adds 64 (reading the accumulator). Functions are piecewise-polynomial
approximations in hardware [Shared]; the reference here evaluates them exactly in FP32, so values
can differ from hardware in the last bits (documented limitation)."""

from __future__ import annotations

import math

import numpy as np

from ...engines import Engine
from ...errors import CapabilityError, ProgramError
from .. import alu
from ..common import (READ, WRITE, access_latency, check_operands, check_scalar_operand, make,
                      per_partition)

NAME = "activation"
PURE = True
OPERANDS = {"dst": WRITE, "data": READ, "bias": READ, "scale": READ, "reduce_res": WRITE}

_erf = np.vectorize(math.erf, otypes=[np.float32])


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _gelu_dx(x):
    # d/dx x * Phi(x) = Phi(x) + x * phi(x): nki.language.gelu_dx [Shared]
    return 0.5 * (1.0 + _erf(x / np.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def _silu_dx(x):
    # d/dx x * s(x) = s(x) * (1 + x * (1 - s(x))): nki.language.silu_dx [Shared]
    s = 1.0 / (1.0 + np.exp(-x))
    return s * (1.0 + x * (1.0 - s))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


FUNCTIONS = {
    "copy": lambda x: x, "identity": lambda x: x, "square": np.square,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu, "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": lambda x: x / (1.0 + np.exp(-1.702 * x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)), "tanh": np.tanh,
    "softplus": lambda x: np.logaddexp(0, x), "mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
    "erf": _erf, "exp": np.exp, "log": np.log, "sin": np.sin, "arctan": np.arctan,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "reciprocal": lambda x: 1.0 / x,
    "sign": np.sign, "abs": np.abs, "cos": np.cos, "tan": np.tan, "negative": np.negative,
    "ceil": np.ceil, "floor": np.floor, "trunc": np.trunc,
    "erf_dx": lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x), "gelu_dx": _gelu_dx,
    "silu_dx": _silu_dx,
}


def function(op):
    name = alu.op_name(op)
    if name not in FUNCTIONS:
        raise ProgramError(f"unknown activation function {name!r}; known: {', '.join(FUNCTIONS)}")
    return name


SAME_SHAPE = ("dst", "data")     # [ISA]; the NKI front end checks it


def build(chip, dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
          reduce_cmd="idle"):
    """`bias`/`scale`: a number or a [P, 1] tensor (NC-v2 takes no immediate bias); `reduce_op`
    reduces each row into ScalarE's accumulator registers by `reduce_cmd`, read out to
    `reduce_res` [P, 1] (activation_reduce)."""
    name = function(op)
    instr = NAME if reduce_res is None else "activation_reduce"
    check_operands(instr, chip, Engine.SCALAR, dst=dst, data=data, bias=bias, scale=scale,
                   reduce_res=reduce_res)
    reads, writes = [data], [dst]
    if isinstance(bias, (int, float)) and not chip.has_scalar_v3_ops:
        raise CapabilityError(NAME, "bias", "a [P, 1] tensor (immediate biases need NC-v3+)", bias,
                              chip.name, "memset a [P, 1] tile to the value and pass it")
    for nm, o in (("bias", bias), ("scale", scale)):
        if o is not None and check_scalar_operand(NAME, nm, o, data, chip):
            reads.append(o)
    if reduce_op is not None:
        alu.reduce(reduce_op)
        if not chip.has_scalar_v3_ops and alu.op_name(reduce_op) != "add":
            raise CapabilityError(NAME, "reduce_op", "add (other reductions need NC-v3+)",
                                  alu.op_name(reduce_op), chip.name)
    c = max(chip.min_ii_cycles, data.free_size)
    if reduce_res is not None:
        check_scalar_operand(instr, "reduce_res", reduce_res, data, chip)
        writes.append(reduce_res)
        c += chip.act_read_accumulator_cycles  # ActReadAccumulator [ArchV2]
    return make(instr, Engine.SCALAR, c, access_latency(chip, len(reads) + len(writes)), reads,
                writes, {"op": name, "bias": bias, "scale": scale,
                         "reduce_op": None if reduce_op is None else alu.op_name(reduce_op),
                         "reduce_cmd": getattr(reduce_cmd, "value", reduce_cmd)})


def reference(x, op, scale=1.0, bias=0.0):
    with np.errstate(all="ignore"):
        return np.asarray(FUNCTIONS[op](x.astype(np.float32) * scale + bias), np.float32)


def semantics(state, emit):
    data = emit.reads[0]
    x = state.read(data)
    p = emit.params
    scale, bias = (default if o is None else per_partition(state, o, o, x)
                   for o, default in ((p["scale"], 1.0), (p["bias"], 0.0)))
    y = reference(x, p["op"], scale, bias)
    state.write(emit.writes[0], y.reshape(emit.writes[0].shape))
    rop = p["reduce_op"]
    part = None if rop is None else alu.reduce(rop)(y.reshape(y.shape[0], -1), axis=1)
    regs = alu.accumulate(state.accumulator(Engine.SCALAR), x.shape[0], part, p["reduce_cmd"],
                          rop or "add")
    if len(emit.writes) > 1:
        state.write(emit.writes[1], regs.reshape(emit.writes[1].shape))
