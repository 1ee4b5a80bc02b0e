"""ALU operators and activation functions, by name, with their NumPy definitions.

``nl.add``, ``nl.exp`` ... are objects of these classes. Passed to an ``nki.isa`` instruction
(``op=nl.add``) they name the operator; called directly (``nl.add(x, y)``) they run the
high-level ``nki.language`` operation, which emits the instruction that computes it.
All arithmetic is float32 inside the engines [ArchV2]; integer bit-vector ops act on bits.
"""

from __future__ import annotations

import numpy as np

def _erf(x):
    # Abramowitz & Stegun 7.1.26 (max error 1.5e-7, below float32 resolution near 1).
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return (s * y).astype(np.float32)


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


def _gelu(x):
    return (0.5 * x * (1.0 + _erf(x / np.sqrt(np.float32(2.0))))).astype(np.float32)


def _gelu_tanh(x):
    return (0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))).astype(np.float32)


class AluOp:
    """A binary (or unary) ALU operator usable by VectorE/GpSimd/ScalarE instructions."""

    def __init__(self, name, fn, kind="arith", reduce=None, nl_impl=None):
        self.name, self.fn, self.kind, self.reduce = name, fn, kind, reduce
        self._nl_impl = nl_impl

    def __call__(self, *args, **kwargs):
        from . import language
        return getattr(language, "_alu_call")(self, *args, **kwargs)

    def __repr__(self):
        return f"nl.{self.name}"


class ActFn:
    """An activation function of the Scalar Engine: ``func(in * scale + bias)``."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __call__(self, x, dtype=None, **kwargs):
        from . import language
        return language._act_call(self, x, dtype=dtype, **kwargs)

    def __repr__(self):
        return f"nl.{self.name}"


def _cmp(f):
    return lambda a, b: f(a, b).astype(np.float32)


def _bits(f):
    return lambda a, b: f(a.astype(np.int64), b.astype(np.int64))


ALU = {
    "add": AluOp("add", np.add, reduce=np.sum),
    "subtract": AluOp("subtract", np.subtract),
    "multiply": AluOp("multiply", np.multiply, reduce=np.prod),
    "divide": AluOp("divide", np.divide),
    "maximum": AluOp("maximum", np.maximum, reduce=np.max),
    "minimum": AluOp("minimum", np.minimum, reduce=np.min),
    "power": AluOp("power", np.power),
    "mod": AluOp("mod", np.mod),
    "fmod": AluOp("fmod", np.fmod),
    "equal": AluOp("equal", _cmp(np.equal), "cmp"),
    "not_equal": AluOp("not_equal", _cmp(np.not_equal), "cmp"),
    "greater": AluOp("greater", _cmp(np.greater), "cmp"),
    "greater_equal": AluOp("greater_equal", _cmp(np.greater_equal), "cmp"),
    "less": AluOp("less", _cmp(np.less), "cmp"),
    "less_equal": AluOp("less_equal", _cmp(np.less_equal), "cmp"),
    "logical_and": AluOp("logical_and", _cmp(np.logical_and), "cmp"),
    "logical_or": AluOp("logical_or", _cmp(np.logical_or), "cmp"),
    "logical_xor": AluOp("logical_xor", _cmp(np.logical_xor), "cmp"),
    "bitwise_and": AluOp("bitwise_and", _bits(np.bitwise_and), "bitvec", reduce=np.bitwise_and.reduce),
    "bitwise_or": AluOp("bitwise_or", _bits(np.bitwise_or), "bitvec", reduce=np.bitwise_or.reduce),
    "bitwise_xor": AluOp("bitwise_xor", _bits(np.bitwise_xor), "bitvec"),
    "left_shift": AluOp("left_shift", _bits(np.left_shift), "bitvec"),
    "right_shift": AluOp("right_shift", _bits(np.right_shift), "bitvec"),
    "abs_max": AluOp("abs_max", lambda a, b: np.maximum(np.abs(a), np.abs(b)), reduce=lambda x, axis: np.max(np.abs(x), axis=axis)),
    "abs_min": AluOp("abs_min", lambda a, b: np.minimum(np.abs(a), np.abs(b)), reduce=lambda x, axis: np.min(np.abs(x), axis=axis)),
    "bypass": AluOp("bypass", lambda a, b: a),
}

ACT = {
    "copy": ActFn("copy", lambda x: x),
    "identity": ActFn("identity", lambda x: x),
    "square": ActFn("square", lambda x: x * x),
    "exp": ActFn("exp", np.exp),
    "log": ActFn("log", np.log),
    "sqrt": ActFn("sqrt", np.sqrt),
    "rsqrt": ActFn("rsqrt", lambda x: 1.0 / np.sqrt(x)),
    "reciprocal": ActFn("reciprocal", lambda x: 1.0 / x),
    "sigmoid": ActFn("sigmoid", _sigmoid),
    "relu": ActFn("relu", lambda x: np.maximum(x, 0)),
    "tanh": ActFn("tanh", np.tanh),
    "gelu": ActFn("gelu", _gelu),
    "gelu_apprx_tanh": ActFn("gelu_apprx_tanh", _gelu_tanh),
    "gelu_apprx_sigmoid": ActFn("gelu_apprx_sigmoid", lambda x: x * _sigmoid(1.702 * x)),
    "silu": ActFn("silu", lambda x: x * _sigmoid(x)),
    "softplus": ActFn("softplus", lambda x: np.logaddexp(0, x)),
    "mish": ActFn("mish", lambda x: x * np.tanh(np.logaddexp(0, x))),
    "erf": ActFn("erf", _erf),
    "erf_dx": ActFn("erf_dx", lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x)),
    "sin": ActFn("sin", np.sin),
    "cos": ActFn("cos", np.cos),
    "tan": ActFn("tan", np.tan),
    "arctan": ActFn("arctan", np.arctan),
    "sign": ActFn("sign", np.sign),
    "abs": ActFn("abs", np.abs),
    "negative": ActFn("negative", np.negative),
    "ceil": ActFn("ceil", np.ceil),
    "floor": ActFn("floor", np.floor),
    "trunc": ActFn("trunc", np.trunc),
}


def alu(op) -> AluOp:
    """Resolve ``op`` (an AluOp, or an ActFn/reduction alias such as nl.max) to an AluOp."""
    if isinstance(op, AluOp):
        return op
    name = getattr(op, "name", None) or getattr(op, "__name__", None) or str(op)
    name = {"max": "maximum", "min": "minimum", "sum": "add", "prod": "multiply"}.get(name, name)
    if name in ALU:
        return ALU[name]
    raise KeyError(name)


def act(op) -> ActFn:
    if isinstance(op, ActFn):
        return op
    name = getattr(op, "name", None) or getattr(op, "__name__", None) or str(op)
    if name in ACT:
        return ACT[name]
    raise KeyError(name)
