"""ALU operators shared by VectorE, ScalarE and GpSimd instructions, by their nki.language names
[Shared]. Arithmetic is FP32 [ArchV2]; comparison results are 1.0/0.0."""

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
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
}

REDUCE = {"add": np.sum, "maximum": np.max, "max": np.max, "minimum": np.min, "min": np.min,
          "multiply": np.prod, "abs_max": lambda x, axis: np.max(np.abs(x), axis=axis)}


def _bits(f, a, b):
    return f(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)).astype(np.float32)


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


def apply(op, a, b):
    with np.errstate(all="ignore"):
        return np.asarray(binary(op)(np.float32(a) if np.isscalar(a) else a,
                                     np.float32(b) if np.isscalar(b) else b), np.float32)
