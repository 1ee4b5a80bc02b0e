"""VectorE tensor_reduce: NKI's `axis` needs the kernel's view (its dimensions before the
access pattern merges them), so its adapter checks it here and computes with the module's
reference; every other VectorE instruction's nisa function is made from its ISA module
(_generic.py)."""

from __future__ import annotations

import math

from ...isa.vector import tensor_reduce as core_reduce
from ._common import _alu, _Ctx


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
    x = ctx.read(data, "data")
    ctx.write(dst, core_reduce.reference(x, o.name, negate, kept) if ctx.numerics else None)
    ctx.emit("vector", [data], [dst], dst=dst, data=data, op=o.name, negate=bool(negate))
