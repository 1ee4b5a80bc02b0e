"""GpSimd instructions: ``iota``, ``affine_select``, ``tensor_partition_reduce``."""

from __future__ import annotations

import math

import numpy as np

from ..ops import ALU

from ._common import _alu, _Ctx


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    ctx = _Ctx("iota")
    ctx.onchip(dst, "dst", ("sbuf",))
    vals = _affine(ctx, dst, pattern, offset, channel_multiplier)
    ctx.write(dst, vals)
    ctx.emit("gpsimd", [], [dst], dst=dst, base=int(offset), channel_multiplier=int(channel_multiplier),
             pattern=_pattern(pattern))


def _affine(ctx, dst, pattern, offset, channel_multiplier):
    pat = [(int(s), int(n)) for s, n in pattern]
    count = math.prod(n for _, n in pat)
    if count != dst.free_size:
        ctx.fail(f"the pattern describes {count} elements per partition but dst has {dst.free_size}")
    if not ctx.numerics:
        return None
    v = np.zeros((1,), np.int64)
    for step, n in pat:
        v = (v[:, None] + step * np.arange(n)[None, :]).reshape(-1)
    ch = np.arange(dst.num_partitions, dtype=np.int64)[:, None] * int(channel_multiplier)
    return (int(offset) + ch + v[None, :]).astype(np.float64)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None,
                  offset=0, name=None):
    ctx = _Ctx("affine_select")
    ctx.onchip(dst, "dst", ("sbuf",))
    ctx.onchip(on_true_tile, "on_true_tile", ("sbuf",))
    ctx.same_pf(dst, on_true_tile, "dst", "on_true_tile")
    cmp = _alu(ctx, cmp_op if cmp_op is not None else ALU["equal"], "cmp_op")
    aff = _affine(ctx, dst, pattern, offset, channel_multiplier)
    x = ctx.read(on_true_tile, "on_true_tile")
    vals = None
    if ctx.numerics:
        pred = cmp.fn(aff, np.zeros_like(aff)) != 0
        vals = np.where(pred, x, np.float32(on_false_value))
    ctx.write(dst, vals)
    ctx.emit("gpsimd", [on_true_tile], [dst], dst=dst, on_true=on_true_tile,
             on_false_value=float(on_false_value), cm=int(channel_multiplier), pattern=_pattern(pattern),
             offset=int(offset), cmp_op=cmp.name)


def _pattern(pattern):
    return tuple(tuple(int(v) for v in x) for x in pattern)

