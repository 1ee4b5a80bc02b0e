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

from ..broadcast import column, plan
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


def run_recipe(ctx, recipe, srcs, dst, p, f, j, scalar=1.0, reverse=False, bcast=False):
    """Emit the chunk's instructions; the last one writes `dst`; `scalar`: the immediate of
    tensor_scalar steps (`reverse`: they compute scalar <op> x); `bcast`: srcs may hold
    broadcast patterns (broadcast.Plan.load)."""
    b = ctx.b
    cur, rest = srcs[0] if srcs else None, list(srcs[1:])
    for i, (kind, arg) in enumerate(recipe):
        last = i == len(recipe) - 1
        out = dst if last else ctx.tmp(f"tmp{i}", (p, f), "float32", j)
        if kind == ACT:
            b.activation(out, cur, arg)
        elif kind == TT and rest:
            if bcast:
                tensor_tensor(b, out, cur, rest.pop(0), arg)
            else:
                b.tensor_tensor(out, cur, rest.pop(0), arg)
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
        run_recipe(ctx, recipe, srcs, dsts[0], p, f, j, scalar, reverse or first, how is not None)
    ctx.stream(out, ins, body, plan=how)


# ---- unary on ScalarE (activation functions) --------------------------------------------------
_ACT_FUNCS = {
    "aten::exp": "exp", "aten::exp2": "exp", "aten::expm1": "exp", "aten::log": "log",
    "aten::log2": "log", "aten::log10": "log", "aten::log1p": "log", "aten::tanh": "tanh",
    "aten::sigmoid": "sigmoid", "aten::relu": "relu", "aten::gelu": "gelu", "aten::silu": "silu",
    "aten::mish": "mish", "aten::softplus": "softplus", "aten::erf": "erf", "aten::sqrt": "sqrt",
    "aten::rsqrt": "rsqrt", "aten::reciprocal": "reciprocal", "aten::sin": "sin",
    "aten::cos": "sin", "aten::atan": "arctan", "aten::sign": "sign", "aten::abs": "abs",
    "aten::square": "square", "aten::elu": "relu", "aten::leaky_relu": "relu",
    "aten::hardtanh": "relu", "aten::hardswish": "silu", "aten::hardsigmoid": "sigmoid",
    "aten::logit": "log", "aten::erfinv": "erf", "aten::relu6": "relu", "aten::celu": "relu",
    "aten::selu": "relu", "aten::_log_softmax_stable": "log",
    # functions without their own ScalarE table are charged as one activation (the cost of an
    # activation does not depend on the function [ISAcost]); e.g. asin via arctan/sqrt forms
    "aten::acos": "arctan", "aten::asin": "arctan", "aten::asinh": "log", "aten::acosh": "log",
    "aten::atanh": "log", "aten::sinh": "exp", "aten::cosh": "exp", "aten::tan": "sin",
    "aten::erfc": "erf", "aten::digamma": "log", "aten::lgamma": "log", "aten::sgn": "sign",
    "aten::sinc": "sin", "aten::hardshrink": "relu", "aten::softshrink": "relu",
    "aten::log_sigmoid_forward": "softplus", "aten::i0": "exp", "aten::special_i0e": "exp",
    "aten::special_i1": "exp", "aten::special_i1e": "exp", "aten::special_ndtri": "erf",
    "aten::special_log_ndtr": "erf", "aten::special_erfcx": "erf", "aten::special_entr": "log",
    "aten::special_xlog1py": "log", "aten::polygamma": "log", "aten::_prelu_kernel": "relu",
    "aten::glu": "sigmoid",
}


@lowers(*_ACT_FUNCS)
def unary_activation(ctx, op):
    func = _ACT_FUNCS[op.op]
    if op.op == "aten::gelu" and op.arg(1) == "tanh":
        func = "gelu_apprx_tanh"
    elementwise(ctx, op, [(ACT, func)], n_inputs=1)


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


@lowers(*_VEC_UNARY)
def unary_vector(ctx, op):
    if op.op in ("aten::pow", "aten::float_power") and len(op.inputs) >= 2:
        elementwise(ctx, op, [(TT, "power")], n_inputs=2)
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
    "aten::threshold_backward": "multiply", "aten::hardtanh_backward": "multiply",
    "aten::leaky_relu_backward": "multiply", "aten::elu_backward": "multiply",
    "aten::relu_backward": "multiply", "aten::isclose": "less_equal",
    "aten::logaddexp": "maximum", "aten::logaddexp2": "maximum", "aten::nextafter": "add",
    "aten::igamma": "multiply", "aten::igammac": "multiply", "aten::special_zeta": "multiply",
}


@lowers(*_BINARY)
def binary(ctx, op):
    # x.div(y, rounding_mode) and alpha-scaled add/sub are still one VectorE instruction: the
    # tensor_scalar/tensor_tensor ALU takes the scale as its second op for free [ISA].
    elementwise(ctx, op, [(TT, _BINARY[op.op])], n_inputs=2, reverse=op.op == "aten::rsub")


# ---- ternary ------------------------------------------------------------------------------------
@lowers("aten::addcmul", "aten::addcdiv", "aten::lerp", "aten::where", "aten::addr",
        "aten::_masked_scale", "aten::masked_scatter")
def ternary(ctx, op):
    name = op.op
    if name == "aten::addcdiv":
        elementwise(ctx, op, [(TT, "add"), (TT, "divide"), (TS, "multiply")], n_inputs=3)
    elif name == "aten::lerp":
        # self + w * (end - self): subtract, then multiply-add (w scalar or tensor)
        elementwise(ctx, op, [(TT, "subtract"), (TT, "multiply"), (TS, "add")], n_inputs=3)
    else:       # where, addcmul, addr, masked scale/scatter: multiply, then add
        elementwise(ctx, op, [(TT, "multiply"), (TT, "add")], n_inputs=3)


# ---- backward of activations: f'(x) on ScalarE, times grad on VectorE ----------------------------
_ACT_BACKWARD = {
    "aten::gelu_backward": "gelu", "aten::silu_backward": "silu",
    "aten::sigmoid_backward": None, "aten::tanh_backward": None, "aten::mish_backward": "mish",
    "aten::softplus_backward": "sigmoid", "aten::hardswish_backward": "silu",
    "aten::hardsigmoid_backward": "sigmoid", "aten::logit_backward": "reciprocal",
}


@lowers(*_ACT_BACKWARD)
def activation_backward(ctx, op):
    func = _ACT_BACKWARD[op.op]
    if func is None:
        # sigmoid/tanh backward use the saved output: grad * y * (1 - y): two VectorE passes
        elementwise(ctx, op, [(TT, "multiply"), (TS, "subtract"), (TT, "multiply")], n_inputs=2)
        return
    # the derivative is one activation on x (gelu/silu have derivative functions [Shared]);
    # inputs are (grad, x): apply f' to x, multiply by grad
    def body(srcs, dsts, p, f, j):
        d = ctx.tmp("dact", (p, f), "float32", j)
        ctx.b.activation(d, srcs[1], func)
        ctx.b.tensor_tensor(dsts[0], d, srcs[0], "multiply")
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
