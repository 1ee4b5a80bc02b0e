"""VectorE instructions (most also run on GpSimd): element-wise, reductions, statistics,
scans, selection."""

from __future__ import annotations

import math

import numpy as np

from ...isa import module_for as core
from .. import dtypes
from ..tensor import NkiTensor

from ...isa.alu import accumulate as _regs_update
from ._common import _alu, _apply, _arg, _Ctx, _dtype_str, _int_path, _scalar_or_vector
from .enums import engine, reduce_cmd


def _reduce_axes(ctx, data, axis):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % data.ndim for a in axes)
    if 0 in axes:
        ctx.fail("the partition axis (0) cannot be reduced by tensor_reduce; transpose first or use nc_matmul "
                 "with a ones vector")
    if sorted(axes) != list(range(data.ndim - len(axes), data.ndim)):
        ctx.fail(f"axis={axis} must be the last contiguous free dimension(s) of the {data.ndim}-D input")
    return axes


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    ctx = _Ctx("tensor_reduce")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    ctx.free_limit(data, "data")
    axes = _reduce_axes(ctx, data, axis)
    o = _alu(ctx, op)
    if o.reduce is None:
        ctx.fail(f"{o!r} is not a reduction operator (nl.add, nl.maximum, nl.minimum, nl.multiply, bitwise and/or)")
    kept = math.prod(n for d, n in enumerate(data.shape[1:], 1) if d not in axes)
    if dst.num_partitions != data.num_partitions or dst.free_size != kept:
        ctx.fail(f"dst must have {data.num_partitions} partitions and {kept} elements per partition "
                 f"for axis={axis} of data {list(data.shape)}, got {list(dst.shape)}")
    vals = None
    x = ctx.read(data, "data")
    if ctx.numerics:
        xs = x.reshape(data.shape[0], kept, -1)
        vals = o.reduce(xs, axis=2)
        if negate:
            vals = -vals
    ctx.write(dst, vals)
    ctx.emit("vector", [data], [dst], dst=dst, data=data, op=o.name, negate=bool(negate))


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_init=0.0, name=None):
    ctx = _Ctx("exponential")
    if not ctx.chip.has_vector_exponential:
        ctx.fail("nisa.exponential is available only on NeuronCore-v4 (trn3); use nisa.activation(op=nl.exp) "
                 "with bias=-max on this target")
    ctx.onchip(dst, "dst")
    ctx.onchip(src, "src")
    ctx.same_pf(dst, src, "dst", "src")
    mv, mt = _scalar_or_vector(ctx, max_value, src, "max_value")
    x = ctx.read(src, "src")
    vals = None
    if ctx.numerics:
        vals = core("exponential").reference(x, mv)
        regs = _regs_update(ctx.trace.vec_regs, src.num_partitions, vals.sum(axis=1), reduce_cmd, "add", reduce_init)
    ctx.write(dst, vals)
    writes = [dst]
    if reduce_res is not None:
        ctx.onchip(reduce_res, "reduce_res")
        ctx.write(reduce_res, regs if ctx.numerics else None)
        writes.append(reduce_res)
    ctx.emit("vector", [src] + ([mt] if mt is not None else []), writes, dst=dst, data=src,
             max_value=_arg(max_value), reduce_res=reduce_res)
