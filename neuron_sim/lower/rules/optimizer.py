"""The optimizer's multi-tensor ops: `_foreach_*` and the fused Adam/AdamW/SGD kernels.

A foreach op over a list of tensors runs as one program: the list is streamed as one flat
sequence of [P, F] chunks (each tensor contiguous, so only the boundaries differ from one big
tensor), with the per-element recipe of the matching single-tensor op. The fused optimizers
stream params, grads and states together: Adam(W) is ~9 VectorE/ScalarE instructions per chunk
(moments, bias corrections, sqrt on ScalarE, update) and stores params and both moments."""

from __future__ import annotations

from ..registry import lowers
from ..spec import TensorSpec, tensor_list
from .elementwise import ACT, COPY, TS, TT, run_recipe, scalar_operand
from .norm import partition_sum


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
    lists = _lists(op)
    x = _flat(lists[0], ctx.ops_done, 0)
    b = ctx.b
    p, cols, f, chunks = ctx.chunked(x)
    acc = ctx.tile("acc", (p, 1), "float32", 0)
    for j, fj in chunks:
        src = ctx.load(x, p, cols, j, fj, off=j * f)
        part = ctx.tmp("part", (p, 1), "float32", j)
        sq = ctx.tmp("sq", (p, fj), "float32", j)
        b.activation(sq, src, "square", reduce_res=part)   # square + free row sum on ScalarE
        b.tensor_tensor(acc, acc, part, "add")
    partition_sum(ctx, acc, p, 1, None)


@lowers("aten::_fused_adam", "aten::_fused_adamw", "aten::_fused_sgd", "aten::_fused_adagrad")
def fused_optimizer(ctx, op):
    lists = _lists(op)
    tag = ctx.ops_done
    flat = [_flat(lst, tag, k) for k, lst in enumerate(lists[:4])]
    params = flat[0]
    if op.op == "aten::_fused_sgd":
        recipe = [(TT, "multiply"), (TT, "add"), (TS, "multiply"), (TT, "subtract")]
        outs = [params] + flat[2:3]
    else:
        recipe = [(TS, "multiply"), (TT, "add"),              # m = b1*m + (1-b1)*g
                  (TT, "multiply"), (TT, "add"),              # v = b2*v + (1-b2)*g*g
                  (ACT, "sqrt"), (TS, "add"),                 # sqrt(v / bc2) + eps
                  (TT, "divide"), (TS, "multiply"), (TT, "subtract")]   # p -= lr * m / denom
        outs = [params] + flat[2:4]
    outs = [TensorSpec(o.shape, o.dtype, None, ("upd",) + tuple(o.id)) for o in outs]

    def body(srcs, dsts, p, f, j):
        run_recipe(ctx, recipe, srcs, dsts[0], p, f, j)
        for k, d in enumerate(dsts[1:]):      # the new moments, copied out by idle GpSimd
            ctx.b.tensor_copy(d, srcs[min(k + 2, len(srcs) - 1)], engine="gpsimd")
    ctx.stream(outs[0], flat, body, outs=outs)
