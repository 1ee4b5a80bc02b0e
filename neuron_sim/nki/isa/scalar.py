"""ScalarE instructions: ``activation`` and ``activation_reduce``."""

from __future__ import annotations

import numpy as np

from ...isa.scalar import activation as core_activation

from ...isa.alu import accumulate as _regs_update
from ._common import _act, _alu, _arg, _Ctx, _scalar_or_vector
from .enums import reduce_cmd


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, name=None):
    ctx = _Ctx("activation")
    _activation(ctx, dst, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    ctx = _Ctx("activation_reduce")
    _activation(ctx, dst, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd.reset_reduce)


def _activation(ctx, dst, op, data, bias, scale, reduce_op, reduce_res, cmd):
    ctx.one_input(dst, data, "data")
    f = _act(ctx, op)
    P = data.num_partitions
    sv, st = _scalar_or_vector(ctx, scale, data, "scale")
    bv, bt = _scalar_or_vector(ctx, bias, data, "bias", allow_scalar=ctx.chip.has_scalar_v3_ops)
    rop = None
    if reduce_op is not None:
        rop = _alu(ctx, reduce_op, "reduce_op")
        if not ctx.chip.has_scalar_v3_ops and rop.name != "add":
            ctx.fail("on NeuronCore-v2 the activation reduction must be nl.add")
    if reduce_res is not None:
        ctx.onchip(reduce_res, "reduce_res")
        if reduce_res.num_partitions != P or reduce_res.free_size != 1:
            ctx.fail(f"reduce_res must be [{P}, 1], got {list(reduce_res.shape)}")
    x = ctx.read(data, "data")
    vals = None
    if ctx.numerics:
        sc = sv if sv is not None else np.float32(1.0)
        bi = bv if bv is not None else np.float32(0.0)
        vals = core_activation.reference(x, f.name, sc, bi)
        part = None
        if rop is not None:
            part = rop.reduce(vals, axis=1)
        regs = _regs_update(ctx.trace.act_regs, P, part, cmd, rop.name if rop else "add")
    ctx.write(dst, vals)
    writes = [dst]
    if reduce_res is not None:
        ctx.write(reduce_res, regs if ctx.numerics else None)
        writes.append(reduce_res)
    ctx.emit("scalar", [data] + [t for t in (st, bt) if t is not None], writes, dst=dst, data=data,
             op=f.name, bias=_arg(bias), scale=_arg(scale), reduce_res=reduce_res,
             reduce_op=rop.name if rop else "add")

