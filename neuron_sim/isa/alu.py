"""ALU operators shared by VectorE, ScalarE and GpSimd instructions, by their nki.language names
[Shared]: the one definition, which nki.language's operator objects use too. Arithmetic is FP32
[ArchV2]; comparison results are 1.0/0.0; bit-vector operators act on the integer bits."""

from __future__ import annotations

import numpy as np

from ..errors import ProgramError

BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "max": np.maximum, "min": np.minimum,
    "power": np.power, "mod": np.mod, "fmod": np.fmod,
    "equal": lambda a, b: (a == b).astype(np.float32),
    "not_equal": lambda a, b: (a != b).astype(np.float32),
    "greater": lambda a, b: (a > b).astype(np.float32),
    "greater_equal": lambda a, b: (a >= b).astype(np.float32),
    "less": lambda a, b: (a < b).astype(np.float32),
    "less_equal": lambda a, b: (a <= b).astype(np.float32),
    "logical_and": lambda a, b: np.logical_and(a, b).astype(np.float32),
    "logical_or": lambda a, b: np.logical_or(a, b).astype(np.float32),
    "logical_xor": lambda a, b: np.logical_xor(a, b).astype(np.float32),
    "bitwise_and": lambda a, b: _bits(np.bitwise_and, a, b),
    "bitwise_or": lambda a, b: _bits(np.bitwise_or, a, b),
    "bitwise_xor": lambda a, b: _bits(np.bitwise_xor, a, b),
    "left_shift": lambda a, b: _bits(np.left_shift, a, b),
    "right_shift": lambda a, b: _bits(np.right_shift, a, b),
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
    "bypass": lambda a, b: a,
}
BITVEC = ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")

REDUCE = {"add": np.sum, "maximum": np.max, "max": np.max, "minimum": np.min, "min": np.min,
          "multiply": np.prod, "abs_max": lambda x, axis: np.max(np.abs(x), axis=axis),
          "abs_min": lambda x, axis: np.min(np.abs(x), axis=axis),
          "bitwise_and": np.bitwise_and.reduce, "bitwise_or": np.bitwise_or.reduce}


def _bits(f, a, b):
    return f(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64))


def op_name(op) -> str:
    name = op if isinstance(op, str) else getattr(op, "__name__", str(op))
    return name.split(".")[-1]


def binary(op):
    name = op_name(op)
    if name not in BINARY:
        raise ProgramError(f"unknown ALU operator {name!r}; known: {', '.join(BINARY)}")
    return BINARY[name]


def reduce(op):
    name = op_name(op)
    if name not in REDUCE:
        raise ProgramError(f"unknown reduce operator {name!r}; known: {', '.join(REDUCE)}")
    return REDUCE[name]


def accumulate(regs, n, part, cmd, op="add", init=None):
    """An engine's accumulator registers (one FP32 per lane, kept across instructions) under a
    reduce command [ISA] reduce_cmd: reset, reduce, reset_reduce, load_reduce or idle. Folds the
    row results `part` of lanes 0..n-1 into them and returns their new values."""
    cmd = getattr(cmd, "value", cmd)
    ident = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}.get(op, 0.0)
    if cmd in ("reset", "reset_reduce"):
        regs[:n] = ident
    if cmd == "load_reduce":
        regs[:n] = init if init is not None else 0.0
    if cmd in ("reduce", "reset_reduce", "load_reduce") and part is not None:
        fn = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
              "minimum": np.minimum}[op]
        regs[:n] = fn(regs[:n], part)
    return regs[:n].copy()


def apply(op, a, b):
    with np.errstate(all="ignore"):
        return np.asarray(binary(op)(np.float32(a) if np.isscalar(a) else a,
                                     np.float32(b) if np.isscalar(b) else b), np.float32)
