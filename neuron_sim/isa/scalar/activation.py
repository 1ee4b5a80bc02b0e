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
from ...errors import ProgramError
from .. import alu
from ..common import access_latency, check_engine_operand, make

NAME = "activation"

_erf = np.vectorize(math.erf, otypes=[np.float32])


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


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
    "erf_dx": lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
}


def function(op):
    name = alu.op_name(op)
    if name not in FUNCTIONS:
        raise ProgramError(f"unknown activation function {name!r}; known: {', '.join(FUNCTIONS)}")
    return name


def build(chip, dst, data, op, bias, scale, reduce_res, reduce_op="add"):
    name = function(op)
    check_engine_operand(NAME, "dst", dst, Engine.SCALAR, chip)
    check_engine_operand(NAME, "data", data, Engine.SCALAR, chip)
    reads, writes = [data], [dst]
    for o in (bias, scale):
        if o is not None and not isinstance(o, (int, float)):
            check_engine_operand(NAME, "bias/scale", o, Engine.SCALAR, chip)
            reads.append(o)
    c = max(chip.min_ii_cycles, data.free_size)
    instr = NAME
    if reduce_res is not None:
        check_engine_operand("activation_reduce", "reduce_res", reduce_res, Engine.SCALAR, chip)
        writes.append(reduce_res)
        c += 64  # ActReadAccumulator [ISAcost]
        instr = "activation_reduce"
    return make(instr, Engine.SCALAR, c, access_latency(chip, len(reads) + len(writes)), reads,
                writes, {"op": name, "bias": bias, "scale": scale, "reduce_op": reduce_op})


def reference(x, op, scale=1.0, bias=0.0):
    with np.errstate(all="ignore"):
        return np.asarray(FUNCTIONS[op](x.astype(np.float32) * scale + bias), np.float32)


def semantics(state, emit):
    data = emit.reads[0]
    x = state.read(data)
    p = emit.params
    bshape = (x.shape[0],) + (1,) * (x.ndim - 1)

    def val(o, default):
        if o is None:
            return default
        if isinstance(o, (int, float)):
            return o
        return state.read(o).reshape(bshape)

    y = reference(x, p["op"], val(p["scale"], 1.0), val(p["bias"], 0.0))
    state.write(emit.writes[0], y.reshape(emit.writes[0].shape))
    if len(emit.writes) > 1:
        r = alu.reduce(p["reduce_op"])(y.reshape(y.shape[0], -1), axis=1)
        state.write(emit.writes[1], np.asarray(r, np.float32).reshape(emit.writes[1].shape))
