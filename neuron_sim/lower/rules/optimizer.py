"""The optimizer's multi-tensor ops: `_foreach_*`, `_foreach_norm` and the fused
Adam/AdamW/SGD/Adagrad kernels.

A foreach op over a list of tensors runs as one program: the list is streamed as one flat
sequence of [P, F] chunks (each tensor contiguous, so only the boundaries differ from one big
tensor), with the per-element recipe of the matching single-tensor op. The fused optimizers
stream params, grads and states together and compute torch's fused kernels' formulas (Adam(W):
9 VectorE/ScalarE instructions per chunk, bias corrections from the step tensor), storing the
params and states in place. `_foreach_norm` reads each member on its own (its own norm)."""

from __future__ import annotations

import numpy as np

from ...program.ap import AccessPattern
from ..registry import lowers
from ..spec import TensorSpec, tensor_list
from .elementwise import ACT, COPY, TS, TT, run_recipe, scalar_operand, stt
from .norm import _param_tile, partition_sum


def _lists(op):
    return [a for a in op.args if tensor_list(a)]


def list_identity(lst):
    """Identity of a tensor list streamed as one flat tensor: its members' when they all have
    one (so the next foreach op over the same tensors finds it resident), else None."""
    ids = tuple(t.id for t in lst)
    return ("foreach",) + ids if ids and all(i is not None for i in ids) else None


def _flat(lst, tag, k):
    total = sum(t.numel for t in lst)
    dtype = lst[0].dtype if lst else "float32"
    ident = list_identity(lst) or ("foreach", tag, k, total)
    return TensorSpec((max(total, 1),), dtype, None, ident)


_RECIPES = {
    "add": [(TT, "add")], "sub": [(TT, "subtract")], "mul": [(TT, "multiply")],
    "div": [(TT, "divide")], "maximum": [(TT, "maximum")], "minimum": [(TT, "minimum")],
    "clamp_max": [(TS, "minimum")], "clamp_min": [(TS, "maximum")],
    "pow": [(TT, "power")], "addcmul": [(TT, "multiply"), (TT, "add")],
    "addcdiv": [(TT, "divide"), (TT, "add")], "lerp": [(TT, "subtract"), (TT, "multiply"),
                                                      (TS, "add")],
    "sqrt": [(ACT, "sqrt")], "rsqrt": [(ACT, "rsqrt")], "exp": [(ACT, "exp")],
    "log": [(ACT, "log")], "reciprocal": [(ACT, "reciprocal")], "sigmoid": [(ACT, "sigmoid")],
    "neg": [(TS, "multiply")], "abs": [(ACT, "abs")], "sign": [(ACT, "sign")],
    "copy": [(COPY, None)], "zero": None, "fill": None,
}

FOREACH = tuple(f"aten::_foreach_{k}" for k in _RECIPES)


@lowers(*FOREACH)
def foreach(ctx, op):
    kind = op.op.split("_foreach_")[1]
    lists = _lists(op)
    if not lists:
        return
    tag = ctx.ops_done
    ins = [_flat(lst, tag, k) for k, lst in enumerate(lists)]
    members = list(op.outputs) or lists[0]
    out = _flat(members, tag, "out")
    if ctx.live is not None and any(ctx.key(t) in ctx.live for t in members):
        ctx.live.add(ctx.key(out))     # a member is a sequence output: store the list
    recipe = _RECIPES[kind]
    if recipe is None:
        ctx.stream(out, [], lambda s, d, p, f, j: ctx.b.memset(d[0], 0.0))
        return
    if kind == "copy":
        ins = ins[1:] or ins
    scalar = scalar_operand(op)
    ctx.stream(out, ins, lambda s, d, p, f, j: run_recipe(ctx, recipe, s, d[0], p, f, j, scalar))


@lowers("aten::_foreach_norm")
def foreach_norm(ctx, op):
    """Each member's norm (ord 2, or 1). The list's flat stream puts two members on a partition
    row at each boundary, and an engine's access starts at a quadrant boundary, so a row cannot
    be split: each member is read in pieces of its own, [P, f] pieces of the list's chunk plan
    (one representative repeat over all members' pieces, equal blocks) and then its tail
    ([p, <= f], every member's emitted). Per piece ScalarE sums |x| or x^2 per partition (an
    activation's free row sum) into the member's column of a [P, n] accumulator, a later piece
    added on VectorE; one TensorE matmul against ones sums the partitions of every member,
    ScalarE takes the square root on the way out of PSUM and one DMA stores the n norms."""
    members = _lists(op)[0]
    b = ctx.b
    P, n = ctx.P, len(members)
    acc = ctx.tile("acc", (P, n), "float32", 0)
    b.memset(acc, 0.0)
    f = ctx.chunks(_flat(members, ctx.ops_done, 0))[2]
    func = "abs" if op.arg(1) == 1 else "square"
    full = [(k, i) for k, t in enumerate(members) for i in range(t.numel // (P * f))]
    n_full = ctx.repeat(len(full))
    pieces = full[:n_full] + [
        (k, t.numel // (P * f)) for k, t in enumerate(members) if t.numel % (P * f)]
    for slot, (k, i) in enumerate(pieces):
        t = members[k]
        p, fi = ctx.flat_shape(min(t.numel - i * P * f, P * f))
        # a member's tail is mostly small: 8 in flight hide the DMA's fixed latency
        src = ctx.tile("in", (p, fi), t.dtype, slot) if slot < n_full else \
            ctx.tile("tail", (p, fi), t.dtype, slot, bufs=8)
        b.dma_copy(src, AccessPattern(ctx.in_hbm(t), 0, p, i * P * f, ((fi, 1),), fi))
        col = acc[0:p, k:k + 1]
        part = col if i == 0 else ctx.tmp("part", (p, 1), "float32", slot)
        b.activation(ctx.tmp("sq", (p, fi), "float32", slot), src, func, reduce_res=part)
        if i:
            b.tensor_tensor(col, col, part, "add")
    out = _flat(op.outputs, ctx.ops_done, "norm")
    partition_sum(ctx, acc, P, n, out, "copy" if func == "abs" else "sqrt")


def _step_scalars(ctx, p, steps, lr, beta1, beta2):
    """The [p, 1] scalars of an Adam step from the first member's step tensor (one DMA, read
    on every partition) and lr (a number, or a tensor read the same way): -lr / (1 - beta1^t)
    and 1 / (1 - beta2^t), beta^t as exp(t ln beta) on ScalarE. One step for the whole flat
    stream: torch steps every member of a list together (semantics.run_lowered refuses
    members whose steps differ)."""
    b = ctx.b
    t = _param_tile(ctx, steps, p, 1)
    out = []
    for k, beta in enumerate((beta1, beta2)):
        c = ctx.tile(f"bc{k}", (p, 1), "float32")
        with np.errstate(divide="ignore"):
            b.activation(c, t, "exp", scale=float(np.log(np.float32(beta))))
        b.tensor_scalar(c, c, "multiply", -1.0, "add", 1.0)          # 1 - beta^t
        b.tensor_scalar(c, c, "power", -1.0)
        out.append(c)
    if isinstance(lr, TensorSpec):
        b.tensor_tensor(out[0], out[0], _param_tile(ctx, lr, p, 1), "multiply")
        lr = 1.0
    b.tensor_scalar(out[0], out[0], "multiply", -float(lr))
    return out


def _neg_lr(ctx, lr, p):
    """-lr as a tensor_scalar operand: the number, or the lr tensor negated on [p, 1]."""
    if not isinstance(lr, TensorSpec):
        return -float(lr)
    t = _param_tile(ctx, lr, p, 1)
    ctx.b.tensor_scalar(t, t, "multiply", -1.0)
    return t


def _adam_body(ctx, op, p, steps):
    """Adam/AdamW as torch's fused kernel computes it, per chunk (VectorE unless noted):
    AdamW decays p by 1 - lr*wd (ScalarE), Adam adds wd*p to the gradient; m = b1 m + (1-b1) g
    ((1-b1) g on ScalarE), v = b2 v + (1-b2) g g ((1-b2) g g as ScalarE's square of
    sqrt(1-b2) g), amsgrad's running max of v, denom = sqrt(v / bc2) (ScalarE) + eps,
    p += (-lr / bc1) m / denom. maximize negates g (folded into the coefficients). VectorE
    does 9N cycles per partition (11N for Adam's weight decay), ScalarE 4N (3N)."""
    lr, beta1, beta2, wd, eps, amsgrad, maximize = (op.arg(i) for i in range(6, 13))
    b = ctx.b
    sign = -1.0 if maximize else 1.0
    nss, ibc2 = _step_scalars(ctx, p, steps, lr, beta1, beta2)
    decay = None
    if op.op == "aten::_fused_adamw":
        decay = ctx.tile("decay", (p, 1), "float32")
        if isinstance(lr, TensorSpec):          # 1 - lr * wd
            b.tensor_scalar(decay, _param_tile(ctx, lr, p, 1), "multiply", -float(wd), "add", 1.0)
        else:
            b.memset(decay, 1.0 - float(lr) * float(wd))

    def body(srcs, dsts, pp, f, j):
        prm, g, m, v = srcs[:4]
        tmp = [ctx.tmp(f"adam{i}", (pp, f), "float32", j) for i in range(3)]
        if decay is None:           # Adam: g = sign * g + wd * p
            stt(ctx, tmp[0], prm, "multiply", float(wd), "subtract" if maximize else "add", g)
            g, sign_g = tmp[0], 1.0
            pd = prm
        else:
            pd = tmp[0]
            b.activation(pd, prm, "copy", scale=decay[0:pp, 0:1])
            sign_g = sign
        b.activation(tmp[1], g, "copy", scale=sign_g * (1.0 - beta1))
        stt(ctx, dsts[1], m, "multiply", float(beta1), "add", tmp[1])
        b.activation(tmp[2], g, "square", scale=float(np.sqrt(1.0 - beta2)))  # (1-b2) g g
        stt(ctx, dsts[2], v, "multiply", float(beta2), "add", tmp[2])
        vv = dsts[2]
        if amsgrad:
            b.tensor_tensor(dsts[3], srcs[4], dsts[2], "maximum")
            vv = dsts[3]
        b.activation(tmp[1], vv, "sqrt", scale=ibc2[0:pp, 0:1])
        b.tensor_scalar(tmp[1], tmp[1], "add", float(eps))
        b.tensor_tensor(tmp[2], dsts[1], tmp[1], "divide")
        stt(ctx, dsts[0], tmp[2], "multiply", nss[0:pp, 0:1], "add", pd)
    return body


def _sgd_body(ctx, op, p, momentum_buffers: bool):
    """SGD as torch's fused kernel computes it: g = sign * g + wd * p; with momentum buffers
    buf = g on the first step, else momentum * buf + (1 - dampening) g ((1 - dampening) g on
    ScalarE); nesterov g += momentum * buf, else g = buf; p -= lr * g."""
    wd, momentum, lr, dampening, nesterov, maximize, first = (op.arg(i) for i in range(3, 10))
    nlr = _neg_lr(ctx, lr, p)
    b = ctx.b

    def body(srcs, dsts, pp, f, j):
        prm, g = srcs[:2]
        ge = ctx.tmp("sgd0", (pp, f), "float32", j)
        stt(ctx, ge, prm, "multiply", float(wd), "subtract" if maximize else "add", g)
        d = ge
        if momentum_buffers:
            buf = dsts[1]
            if first:
                b.tensor_copy(buf, ge)
            else:
                gs = ctx.tmp("sgd1", (pp, f), "float32", j)
                b.activation(gs, ge, "copy", scale=1.0 - float(dampening))
                stt(ctx, buf, srcs[2], "multiply", float(momentum), "add", gs)
            d = buf
            if nesterov:
                d = ctx.tmp("sgd1", (pp, f), "float32", j)
                stt(ctx, d, buf, "multiply", float(momentum), "add", ge)
        stt(ctx, dsts[0], d, "multiply", nlr if isinstance(nlr, float) else nlr[0:pp, 0:1], "add",
            prm)
    return body


def _adagrad_body(ctx, op, p, steps):
    """Adagrad as torch's fused kernel computes it: g = sign * g + wd * p, s += g g,
    p -= lr / (1 + (t - 1) lr_decay) g / (sqrt(s) + eps) (g g and the sqrt on ScalarE)."""
    lr, lr_decay, wd, eps, maximize = (op.arg(i) for i in range(4, 9))
    b = ctx.b
    nclr = ctx.tile("clr", (p, 1), "float32")
    b.tensor_scalar(nclr, _param_tile(ctx, steps, p, 1), "add", -1.0, "multiply",
                    float(lr_decay))
    b.tensor_scalar(nclr, nclr, "add", 1.0, "power", -1.0)
    if isinstance(lr, TensorSpec):
        b.tensor_tensor(nclr, nclr, _neg_lr(ctx, lr, p), "multiply")
    else:
        b.tensor_scalar(nclr, nclr, "multiply", -float(lr))

    def body(srcs, dsts, pp, f, j):
        prm, g, s = srcs[:3]
        ge, tmp = (ctx.tmp(f"adagrad{i}", (pp, f), "float32", j) for i in range(2))
        stt(ctx, ge, prm, "multiply", float(wd), "subtract" if maximize else "add", g)
        b.activation(tmp, ge, "square")
        b.tensor_tensor(dsts[1], s, tmp, "add")
        b.activation(tmp, dsts[1], "sqrt")
        b.tensor_scalar(tmp, tmp, "add", float(eps))
        b.tensor_tensor(tmp, ge, tmp, "divide")
        stt(ctx, dsts[0], tmp, "multiply", nclr[0:pp, 0:1], "add", prm)
    return body


STEPS_ARG = {"aten::_fused_adam": 5, "aten::_fused_adamw": 5, "aten::_fused_adagrad": 3}
_WRITES = {"aten::_fused_adam": (0, 2, 3, 4), "aten::_fused_adamw": (0, 2, 3, 4),
           "aten::_fused_sgd": (0, 2), "aten::_fused_adagrad": (0, 2)}


@lowers("aten::_fused_adam", "aten::_fused_adamw", "aten::_fused_sgd", "aten::_fused_adagrad")
def fused_optimizer(ctx, op):
    """Params, grads and states streamed together as flat lists (one chunk plan), each chunk
    updated by the optimizer's formula (Adam/AdamW 9 instructions, SGD 2 to 5, Adagrad 7), and
    the updated lists stored in place (the functional variant: into its output lists, in order
    self_out, grads_out, then the states)."""
    tag = ctx.ops_done
    args = [a if tensor_list(a) else [] for a in op.args[:6]]
    n = len(args[0])
    if not n:
        return
    flat = {k: _flat(lst, tag, k) for k, lst in enumerate(args) if lst}
    written = [k for k in _WRITES[op.op] if k in flat]
    outs = [flat[k] for k in written]
    if op.outputs:                  # functional: (self_out, grads_out, states...) lists of n
        groups = [op.outputs[i:i + n] for i in range(0, len(op.outputs), n)]
        outs = [_flat(groups[k], tag, ("out", k)) for k in written if k < len(groups)]
    if ctx.live is not None:        # the updated lists are the op's results: always stored
        ctx.live.update(ctx.key(o) for o in outs)
    p = ctx.flat_shape(flat[0])[0]
    if op.op == "aten::_fused_sgd":
        ins = [flat[0], flat[1]] + ([flat[2]] if 2 in flat else [])
        body = _sgd_body(ctx, op, p, 2 in flat)
    else:
        adagrad = op.op == "aten::_fused_adagrad"     # (self, grads, state_sums, state_steps)
        ins = [flat[k] for k in ((0, 1, 2) if adagrad else (0, 1, 2, 3, 4)) if k in flat]
        steps = flat[STEPS_ARG[op.op]]
        body = (_adagrad_body if adagrad else _adam_body)(ctx, op, p, steps)
    ctx.stream(outs[0], ins, body, outs=outs)
