"""Element-wise ops: unary, binary, ternary, casts, fills, comparisons, activations and their
backward ops, dropout.

Engine choice follows the hardware [ArchV2][Shared]: transcendental functions and activations
run on ScalarE (`activation`, max(64, N) cycles whatever the function, scale and bias free);
arithmetic, comparisons and selects on VectorE (`tensor_tensor` max(64, 2N) FP32 / max(64, N) when
all BF16 in SBUF; `tensor_scalar` max(64, N) with the NC-v3 2x/4x BF16 modes). A recipe lists the
instructions of one chunk; the first instruction reads the op's first device input, each `tt`
step consumes the next device input (or becomes a `tensor_scalar` when the op's other operand is
a Python/CPU scalar). Data streams HBM -> SBUF -> engines -> HBM in [P, F] chunks
(context.LowerCtx.stream)."""

from __future__ import annotations

import math

from ..broadcast import column, plan
from .. import reads
from ..registry import lowers
from .movement import device_copy

ACT = "act"      # ScalarE activation(func)
TT = "tt"        # VectorE tensor_tensor(op) with the next input (tensor_scalar if none left)
TS = "ts"        # VectorE tensor_scalar(op)
COPY = "copy"    # VectorE tensor_copy (casts: arithmetic is FP32, casts free [ArchV2])
RNG = "rng"      # random bits (stand-in: a GpSimd instruction of 150 + N cycles, see below)


def scalar_operand(op) -> float:
    """The op's first Python number after its first tensor (add.Scalar's other, clamp_min's
    min, _foreach_mul.Scalar's scalar): the immediate of its tensor_scalar steps, so the program
    computes the op (semantics.py); the cost does not depend on it. 1.0 without one."""
    seen = False
    for a in op.args:
        if type(a) in (int, float) and seen:
            return float(a)
        seen = seen or not isinstance(a, (int, float, str, type(None)))
    return 1.0


def run_recipe(ctx, recipe, srcs, dst, p, f, j, scalar=1.0, reverse=False):
    """Emit the chunk's instructions; the last one writes `dst`; `scalar`: the immediate of
    tensor_scalar steps (`reverse`: they compute scalar <op> x)."""
    b = ctx.b
    cur, rest = srcs[0] if srcs else None, list(srcs[1:])
    for i, (kind, arg) in enumerate(recipe):
        last = i == len(recipe) - 1
        out = dst if last else ctx.tmp(f"tmp{i}", (p, f), "float32", j)
        if kind == ACT:
            b.activation(out, cur, arg)
        elif kind == TT and rest:       # srcs may hold broadcast patterns (Plan.load)
            tensor_tensor(b, out, cur, rest.pop(0), arg)
        elif kind in (TT, TS):
            b.tensor_scalar(out, cur, arg, scalar, reverse0=reverse)
        elif kind == COPY:
            b.tensor_copy(out, cur)
        elif kind == RNG:
            # No rng instruction in the builder yet: nki.isa.rng/rand2 generate on-chip; charged
            # as one GpSimd instruction of 150 + N cycles (gpsimd_elementwise_cycles assumption).
            b.iota(out, base=0, channel_multiplier=1)
        cur = out
    return cur


def tensor_tensor(b, out, x, y, op):
    """out = x <op> y; a per-partition broadcast operand (broadcast.column) as tensor_scalar's
    [p, 1] operand: one input stream, max(64, N) rather than max(64, 2N) [ISAcost]."""
    cy = column(y)
    if cy is not None:
        return b.tensor_scalar(out, x, op, cy)
    cx = column(x)
    if cx is not None:
        return b.tensor_scalar(out, y, op, cx, reverse0=True)
    return b.tensor_tensor(out, x, y, op)


def elementwise(ctx, op, recipe, n_inputs, reverse=False):
    """Stream the op's first `n_inputs` device inputs through `recipe` into its first output;
    `reverse` (rsub): the op is other <op> self. Broadcast operands: broadcast.plan."""
    out = op.outputs[0]
    ins = [t for t in op.inputs if t.numel > 0][:n_inputs]
    first = bool(ins) and type(op.args[0]) in (int, float)     # 2 ** x: pow.Scalar
    scalar = float(op.args[0]) if first else scalar_operand(op)
    if reverse and len(ins) > 1:
        ins, reverse = ins[::-1], False
    how = plan(out, ins, ctx.chip)[0] if any(t.numel != out.numel for t in ins) else None

    def body(srcs, dsts, p, f, j):
        if not srcs:
            srcs = [dsts[0]]
        run_recipe(ctx, recipe, srcs, dsts[0], p, f, j, scalar, reverse or first)
    ctx.stream(out, ins, body, plan=how)


# ---- unary on ScalarE (activation functions) --------------------------------------------------
_ACT_FUNCS = {
    "aten::exp": "exp", "aten::exp2": "exp", "aten::expm1": "exp", "aten::log": "log",
    "aten::log2": "log", "aten::log10": "log", "aten::log1p": "log", "aten::tanh": "tanh",
    "aten::sigmoid": "sigmoid", "aten::relu": "relu", "aten::gelu": "gelu", "aten::silu": "silu",
    "aten::mish": "mish", "aten::softplus": "softplus", "aten::erf": "erf", "aten::sqrt": "sqrt",
    "aten::rsqrt": "rsqrt", "aten::reciprocal": "reciprocal", "aten::sin": "sin",
    "aten::cos": "cos", "aten::atan": "arctan", "aten::sign": "sign", "aten::abs": "abs",
    "aten::square": "square", "aten::elu": "relu", "aten::leaky_relu": "relu",
    "aten::hardtanh": "relu", "aten::hardswish": "silu", "aten::hardsigmoid": "sigmoid",
    "aten::logit": "log", "aten::erfinv": "erf", "aten::relu6": "relu", "aten::celu": "relu",
    "aten::selu": "relu", "aten::_log_softmax_stable": "log",
    # functions without their own ScalarE table are charged as one activation (the cost of an
    # activation does not depend on the function [ISAcost]); e.g. asin via arctan/sqrt forms
    "aten::acos": "arctan", "aten::asin": "arctan", "aten::asinh": "log", "aten::acosh": "log",
    "aten::atanh": "log", "aten::sinh": "exp", "aten::cosh": "exp", "aten::tan": "tan",
    "aten::erfc": "erf", "aten::digamma": "log", "aten::lgamma": "log", "aten::sgn": "sign",
    "aten::sinc": "sin", "aten::hardshrink": "relu", "aten::softshrink": "relu",
    "aten::log_sigmoid_forward": "softplus", "aten::i0": "exp", "aten::special_i0e": "exp",
    "aten::special_i1": "exp", "aten::special_i1e": "exp", "aten::special_ndtri": "erf",
    "aten::special_log_ndtr": "erf", "aten::special_erfcx": "erf", "aten::special_entr": "log",
    "aten::special_xlog1py": "log", "aten::polygamma": "log", "aten::_prelu_kernel": "relu",
    "aten::glu": "sigmoid",
}


def _clamp_or_leaky(ctx, op):
    """hardtanh, relu6 (a clamp: one tensor_scalar) and leaky_relu (max(x, slope * x), min for a
    slope above 1: one scalar_tensor_tensor) are VectorE ALU ops, not ScalarE tables."""
    if op.op == "aten::leaky_relu":
        slope = number(op.arg(1), 0.01)

        def body(s, d, p, f, j):
            stt(ctx, d[0], s[0], "multiply", slope, "maximum" if slope <= 1 else "minimum", s[0])
    else:
        lo, hi = (0.0, 6.0) if op.op == "aten::relu6" else (number(op.arg(1), -1.0),
                                                           number(op.arg(2)))

        def body(s, d, p, f, j):
            ctx.b.tensor_scalar(d[0], s[0], "maximum", lo, "minimum", hi)
    ctx.stream(op.outputs[0], op.inputs[:1], body)


@lowers(*_ACT_FUNCS)
def unary_activation(ctx, op):
    if op.op in ("aten::hardtanh", "aten::relu6", "aten::leaky_relu"):
        _clamp_or_leaky(ctx, op)
        return
    func = _ACT_FUNCS[op.op]
    if op.op == "aten::gelu" and op.arg(1) == "tanh":
        func = "gelu_apprx_tanh"
    # exp2(x) = exp(x ln 2): the scale is free [ISA]
    scale = math.log(2.0) if op.op == "aten::exp2" else 1.0
    ctx.stream(op.outputs[0], op.inputs[:1],
               lambda s, d, p, f, j: ctx.b.activation(d[0], s[0], func, scale=scale))


# ---- unary on VectorE (arithmetic) ------------------------------------------------------------
_VEC_UNARY = {
    "aten::neg": "multiply", "aten::floor": "subtract", "aten::ceil": "add",
    "aten::round": "add", "aten::trunc": "subtract", "aten::frac": "mod",
    "aten::bitwise_not": "bitwise_xor", "aten::logical_not": "equal", "aten::clamp": "maximum",
    "aten::clamp_min": "maximum", "aten::clamp_max": "minimum", "aten::clip": "maximum",
    "aten::isnan": "not_equal", "aten::isinf": "equal", "aten::isneginf": "equal",
    "aten::isposinf": "equal", "aten::isreal": "equal", "aten::isfinite": "less",
    "aten::nan_to_num": "minimum", "aten::threshold": "maximum", "aten::positive": "add",
    "aten::signbit": "less", "aten::pow": "power", "aten::float_power": "power",
}


# the ops one tensor_scalar computes: (op0, operand0[, op1, operand1]) (clamp: its bounds)
_VEC_EXACT = {
    "aten::neg": ("multiply", -1.0), "aten::positive": ("multiply", 1.0),
    "aten::logical_not": ("equal", 0.0), "aten::frac": ("fmod", 1.0),
    "aten::isposinf": ("equal", math.inf), "aten::isneginf": ("equal", -math.inf),
    "aten::isinf": ("abs_max", 0.0, "equal", math.inf),
    "aten::isfinite": ("abs_max", 0.0, "less", math.inf),
}


@lowers(*_VEC_UNARY, reads=reads.BROADCAST)
def unary_vector(ctx, op):
    if op.op in ("aten::pow", "aten::float_power") and len(op.inputs) >= 2:
        elementwise(ctx, op, [(TT, "power")], n_inputs=2)
        return
    steps = _VEC_EXACT.get(op.op)
    if op.op in ("aten::clamp", "aten::clip"):
        steps = sum(((f, float(v)) for f, v in (("maximum", op.arg(1)), ("minimum", op.arg(2)))
                     if type(v) in (int, float)), ())
    if steps:
        ctx.stream(op.outputs[0], op.inputs[:1],
                   lambda s, d, p, f, j: ctx.b.tensor_scalar(d[0], s[0], *steps))
        return
    # a two-sided clamp too: one tensor_scalar with op0 and op1
    elementwise(ctx, op, [(TS, _VEC_UNARY[op.op])], n_inputs=1)


# ---- binary (tensor_tensor, or tensor_scalar with a scalar operand) -----------------------------
_BINARY = {
    "aten::add": "add", "aten::sub": "subtract", "aten::rsub": "subtract", "aten::mul": "multiply",
    "aten::div": "divide", "aten::true_divide": "divide", "aten::floor_divide": "divide",
    "aten::maximum": "maximum", "aten::minimum": "minimum", "aten::fmax": "maximum",
    "aten::fmin": "minimum", "aten::remainder": "mod", "aten::fmod": "fmod",
    "aten::eq": "equal", "aten::ne": "not_equal", "aten::lt": "less", "aten::le": "less_equal",
    "aten::gt": "greater", "aten::ge": "greater_equal", "aten::logical_and": "logical_and",
    "aten::logical_or": "logical_or", "aten::logical_xor": "logical_xor",
    "aten::bitwise_and": "bitwise_and", "aten::bitwise_or": "bitwise_or",
    "aten::bitwise_xor": "bitwise_xor", "aten::__and__": "bitwise_and",
    "aten::__or__": "bitwise_or", "aten::__xor__": "bitwise_xor", "aten::xlogy": "multiply",
    "aten::atan2": "divide", "aten::hypot": "add", "aten::copysign": "multiply",
    "aten::heaviside": "greater", "aten::masked_fill": "multiply",
    "aten::elu_backward": "multiply", "aten::relu_backward": "multiply",
    "aten::isclose": "less_equal",
    "aten::logaddexp": "maximum", "aten::logaddexp2": "maximum", "aten::nextafter": "add",
    "aten::igamma": "multiply", "aten::igammac": "multiply", "aten::special_zeta": "multiply",
}


def _rsub(ctx, op, s, dst):
    # other - alpha * self: a tensor other (alpha 1: one tensor_tensor) or a scalar one
    alpha = number(op.arg(2))
    if len(s) == 1:
        ctx.b.tensor_scalar(dst, s[0], "multiply", -alpha, "add", number(op.arg(1)))
    elif alpha == 1:
        ctx.b.tensor_tensor(dst, s[1], s[0], "subtract")
    else:
        stt(ctx, dst, s[0], "multiply", alpha, "subtract", s[1], reverse1=True)


def _masked_fill(ctx, op, s, dst):
    # self, then the value where the mask is set
    ctx.b.tensor_copy(dst, s[0])
    ctx.b.instruction("tensor_copy_predicated", dst=dst, src=number(op.arg(2), 0.0),
                      predicate=s[1])


@lowers(*_BINARY, reads=reads.BROADCAST)
def binary(ctx, op):
    # x.div(y, rounding_mode) and alpha-scaled add/sub are still one VectorE instruction: the
    # tensor_scalar/tensor_tensor ALU takes the scale as its second op for free [ISA].
    emit = {"aten::rsub": _rsub, "aten::masked_fill": _masked_fill}.get(op.op)
    if emit is not None and not broadcasts(op) and (op.op == "aten::rsub"
                                                    or type(op.arg(2)) in (int, float)):
        ctx.stream(op.outputs[0], op.inputs[:2],
                   lambda s, d, p, f, j: emit(ctx, op, s, d[0]))
        return
    elementwise(ctx, op, [(TT, _BINARY[op.op])], n_inputs=2, reverse=op.op == "aten::rsub")


# ---- ternary ------------------------------------------------------------------------------------
def stt(ctx, dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False):
    """dst = (data <op0> operand0) <op1> operand1: one VectorE scalar_tensor_tensor (a * s + c,
    a mask times a tensor; reverse0/1 swap an op's operands) [ISA]."""
    ctx.b.instruction("scalar_tensor_tensor", dst=dst, data=data, op0=op0, operand0=operand0,
                      op1=op1, operand1=operand1, reverse0=reverse0, reverse1=reverse1)


def broadcasts(op) -> bool:
    """An input smaller than the output: loaded whole, not shaped like the chunk, which
    scalar_tensor_tensor and select need (semantics.why_unchecked refuses these)."""
    return any(t.numel != op.outputs[0].numel for t in op.inputs)


def number(a, default=1.0) -> float:
    """A scalar argument's value (`default` when it is None or a tensor)."""
    return float(a) if type(a) in (int, float) else default


def _addc(ctx, op, s, dst, tmp):
    # ATen: self + value * (t1 <op> t2), value folded in with the add by one instruction
    b, (x, t1, t2) = ctx.b, s
    b.tensor_tensor(tmp(0), t1, t2, "multiply" if op.op == "aten::addcmul" else "divide")
    stt(ctx, dst, tmp(0), "multiply", number(op.arg(3)), "add", x)


def _lerp(ctx, op, s, dst, tmp):
    # ATen: w < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w); a tensor weight
    # takes the first form everywhere (the same value up to FP32 rounding)
    b, (x, end), w = ctx.b, s[:2], op.arg(2)
    b.tensor_tensor(tmp(0), end, x, "subtract")
    if len(s) > 2:
        b.tensor_tensor(tmp(1), tmp(0), s[2], "multiply")
        b.tensor_tensor(dst, tmp(1), x, "add")
    elif number(w) < 0.5:
        stt(ctx, dst, tmp(0), "multiply", number(w), "add", x)
    else:
        stt(ctx, dst, tmp(0), "multiply", 1.0 - number(w), "subtract", end, reverse1=True)


def _where(ctx, op, s, dst, tmp):
    # select on VectorE; a scalar branch: copy the tensor one, then the scalar where it is picked
    if len(s) == 3:
        ctx.b.instruction("select", dst=dst, predicate=s[0], on_true=s[1], on_false=s[2])
        return
    value = next(number(a, 0.0) for a in op.args[1:] if type(a) in (int, float))
    ctx.b.tensor_copy(dst, s[1])
    ctx.b.instruction("tensor_copy_predicated", dst=dst, src=value, predicate=s[0],
                      reverse_pred=type(op.arg(2)) in (int, float))


def _masked_scale(ctx, op, s, dst, tmp):
    stt(ctx, dst, s[0], "multiply", number(op.arg(2)), "multiply", s[1])


_TERNARY = {"aten::addcmul": _addc, "aten::addcdiv": _addc, "aten::lerp": _lerp,
            "aten::where": _where, "aten::_masked_scale": _masked_scale}


@lowers("aten::addcmul", "aten::addcdiv", "aten::lerp", "aten::where", "aten::addr",
        "aten::_masked_scale", "aten::masked_scatter", reads=reads.BROADCAST)
def ternary(ctx, op):
    emit = _TERNARY.get(op.op)
    ins = [t for t in op.inputs if t.numel > 0][:3]
    if emit is None or len(ins) < 2 or broadcasts(op):
        # addr, masked_scatter, broadcast operands: the instruction count (multiply, add)
        elementwise(ctx, op, [(TT, "multiply"), (TT, "add")], n_inputs=3)
        return

    def body(srcs, dsts, p, f, j):
        emit(ctx, op, srcs, dsts[0], lambda i: ctx.tmp(f"tmp{i}", (p, f), "float32", j))
    ctx.stream(op.outputs[0], ins, body)


# ---- backward of activations: grad times f'(x) ------------------------------------------------
# f' as one ScalarE activation: a derivative table [Shared] (gelu_dx, silu_dx), softplus' is the
# sigmoid of beta * x; mish, hardswish and logit have none: their f' is charged as one
# activation of the same cost (semantics.TIMING_ONLY)
_ACT_BACKWARD = {
    "aten::gelu_backward": "gelu_dx", "aten::silu_backward": "silu_dx",
    "aten::softplus_backward": "sigmoid", "aten::mish_backward": "mish",
    "aten::hardswish_backward": "silu", "aten::logit_backward": "reciprocal",
}


def _from_output(ctx, op, g, y, dst, tmp):
    # from the forward's output y, in ATen's order: sigmoid (1 - y) * g * y, tanh (1 - y * y) * g
    if op.op == "aten::tanh_backward":
        ctx.b.tensor_tensor(tmp(0), y, y, "multiply")
        stt(ctx, dst, tmp(0), "subtract", 1.0, "multiply", g, reverse0=True)
        return
    stt(ctx, tmp(0), y, "subtract", 1.0, "multiply", g, reverse0=True)
    ctx.b.tensor_tensor(dst, tmp(0), y, "multiply")


def _threshold(ctx, op, g, x, dst, tmp):
    # x <= threshold ? 0 : g (relu's backward): the mask times g in one instruction
    stt(ctx, dst, x, "greater", number(op.arg(2), 0.0), "multiply", g)


def _hardtanh(ctx, op, g, x, dst, tmp):
    # x <= min or x >= max ? 0 : g
    stt(ctx, tmp(0), x, "greater", number(op.arg(2), -1.0), "multiply", g)
    stt(ctx, dst, x, "less", number(op.arg(3)), "multiply", tmp(0))


def _hardsigmoid(ctx, op, g, x, dst, tmp):
    # -3 < x < 3 ? g / 6 : 0
    ctx.b.tensor_scalar(tmp(0), x, "abs_max", 0.0, "less", 3.0)
    stt(ctx, dst, g, "multiply", 1.0 / 6.0, "multiply", tmp(0))


def _leaky_relu(ctx, op, g, x, dst, tmp):
    # x > 0 ? g : g * slope
    ctx.b.tensor_scalar(tmp(0), x, "greater", 0.0)
    ctx.b.tensor_scalar(tmp(1), g, "multiply", number(op.arg(2), 0.01))
    ctx.b.instruction("select", dst=dst, predicate=tmp(0), on_true=g, on_false=tmp(1))


_VEC_BACKWARD = {"aten::sigmoid_backward": _from_output, "aten::tanh_backward": _from_output,
                 "aten::threshold_backward": _threshold, "aten::hardtanh_backward": _hardtanh,
                 "aten::hardsigmoid_backward": _hardsigmoid,
                 "aten::leaky_relu_backward": _leaky_relu}


@lowers(*_ACT_BACKWARD, *_VEC_BACKWARD)
def activation_backward(ctx, op):
    """Inputs (grad, x) (sigmoid and tanh: (grad, y), the forward's output): f'(x) on ScalarE
    times grad, or the derivative in VectorE masks and selects."""
    func = _ACT_BACKWARD.get(op.op)
    beta = number(op.arg(2)) if op.op == "aten::softplus_backward" else 1.0
    if func is None and broadcasts(op):
        elementwise(ctx, op, [(TT, "multiply")], n_inputs=2)
        return

    def body(srcs, dsts, p, f, j):
        def tmp(i):
            return ctx.tmp(f"dact{i}", (p, f), "float32", j)
        if func is None:
            _VEC_BACKWARD[op.op](ctx, op, srcs[0], srcs[1], dsts[0], tmp)
            return
        ctx.b.activation(tmp(0), srcs[1], func, scale=beta)
        ctx.b.tensor_tensor(dsts[0], tmp(0), srcs[0], "multiply")
    ctx.stream(op.outputs[0], op.inputs[:2], body)


# ---- copies that compute (casts), fills ------------------------------------------------------
COPY_OPS = ("aten::_to_copy", "aten::to", "aten::clone", "aten::contiguous", "aten::copy",
            "aten::_copy_from", "aten::alias_copy", "aten::lift_fresh_copy", "aten::detach_copy",
            "aten::view_copy", "aten::_reshape_copy")


@lowers(*COPY_OPS)
def copy_like(ctx, op):
    """A copy between device tensors: what neuron::copy_d2d does (movement.device_copy: HBM ->
    HBM for one dtype and layout, else through SBUF: dma_transpose for a transposed source, a
    VectorE pass for a cast)."""
    device_copy(ctx, op.inputs[-1] if op.op == "aten::copy" else op.inputs[0], op.outputs[0])


@lowers("aten::fill", "aten::zero", "aten::zeros_like", "aten::ones_like", "aten::full_like",
        "aten::zeros", "aten::ones", "aten::full", "aten::empty_like", "aten::new_zeros",
        "aten::new_ones", "aten::new_full", "aten::scalar_tensor")
def fill(ctx, op):
    """memset on VectorE (zero into BF16/FP16 at N/2 [ISAcost]) and a store; no loads."""
    if op.op != "aten::empty_like":
        ctx.stream(op.outputs[0], [], lambda s, d, p, f, j: ctx.b.memset(d[0], 0.0))


# ---- random numbers ---------------------------------------------------------------------------
@lowers("aten::uniform", "aten::normal", "aten::bernoulli", "aten::random", "aten::exponential",
        "aten::rand_like", "aten::randn_like", "aten::randint_like", "aten::rand",
        "aten::randn", "aten::randint", "aten::geometric", "aten::cauchy", "aten::log_normal",
        "aten::multinomial", "aten::randperm")
def random(ctx, op):
    """Generate bits (GpSimd stand-in, see run_recipe), scale/shift on VectorE (normal: one
    ScalarE activation more for the Box-Muller log/sin)."""
    steps = [(RNG, None), (TS, "multiply")]
    if op.op in ("aten::normal", "aten::randn", "aten::randn_like", "aten::log_normal"):
        steps.insert(1, (ACT, "log"))
    elif op.op == "aten::bernoulli":
        steps[1] = (TS, "less")
    elementwise(ctx, op, steps, n_inputs=0)


@lowers("aten::native_dropout", "aten::dropout", "aten::native_dropout_backward",
        "aten::feature_dropout")
def dropout(ctx, op):
    """Forward: random bits, compare with p (mask), multiply x by mask / (1 - p): outputs (y, mask).
    Backward: grad * mask * scale, one VectorE pass."""
    if op.op == "aten::native_dropout_backward":
        elementwise(ctx, op, [(TT, "multiply")], n_inputs=2)
        return

    def body(srcs, dsts, p, f, j):
        bits = ctx.tmp("bits", (p, f), "float32", j)
        ctx.b.iota(bits, base=0, channel_multiplier=1)          # RNG stand-in (GpSimd)
        mask = dsts[1] if len(dsts) > 1 else ctx.tmp("mask", (p, f), "float32", j)
        ctx.b.tensor_scalar(mask, bits, "less", 0.5)
        ctx.b.tensor_tensor(dsts[0], srcs[0], mask, "multiply")
    ctx.stream(op.outputs[0], op.inputs[:1], body, outs=list(op.outputs[:2]))
