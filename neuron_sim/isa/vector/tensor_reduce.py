"""tensor_reduce: dst = reduce(op) of data along its trailing free elements, dst's free size
groups per partition (dst [P, 1]: all of them), optionally negated.

Cost [ISAcost]: N VectorE cycles; N/2 when input and output are BF16 and op is add or max;
never below MIN_II = 64."""

from __future__ import annotations

import math

import numpy as np

from ...engines import Engine
from ...errors import ProgramError
from .. import alu
from ..common import READ, WRITE, access_latency, check_operands, is16, make

NAME = "tensor_reduce"
PURE = True
ENGINES = (Engine.VECTOR, Engine.GPSIMD)
OPERANDS = {"dst": WRITE, "data": READ}


def check_views(dst, data, axis, **_):
    """NKI's `axis` on the kernel's views (their dimensions before access patterns merge them):
    the trailing free dimensions of data (None: all of them), leaving dst's free elements."""
    axes = range(1, data.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    axes = tuple(a % data.ndim for a in axes)
    if 0 in axes:
        raise ProgramError("the partition axis (0) cannot be reduced by tensor_reduce; transpose "
                           "first or use nc_matmul with a ones vector")
    if sorted(axes) != list(range(data.ndim - len(axes), data.ndim)):
        raise ProgramError(f"axis={axis} must be the last contiguous free dimension(s) of the "
                           f"{data.ndim}-D input")
    kept = math.prod(n for d, n in enumerate(data.shape[1:], 1) if d not in axes)
    if dst.num_partitions != data.num_partitions or dst.free_size != kept:
        raise ProgramError(f"dst must have {data.num_partitions} partitions and {kept} elements "
                           f"per partition for axis={axis} of data {list(data.shape)}, got "
                           f"{list(dst.shape)}")


def build(chip, dst, op, data, axis=None, negate=False, keepdims=False, engine=Engine.VECTOR):
    """`axis` and `keepdims` are NKI's (checked by `check_views`); the reduction is over data's
    trailing elements, in dst's free size groups."""
    alu.reduce(op)
    check_operands(NAME, chip, engine, dst=dst, data=data)
    n = data.free_size
    fast = is16(dst) and is16(data) and alu.op_name(op) in ("add", "max", "maximum")
    c = max(chip.min_ii_cycles, n / 2 if fast else n)
    if engine == Engine.GPSIMD:
        c = chip.gpsimd_start_cycles + n
    return make(NAME, engine, c, access_latency(chip, 2), (data,), (dst,),
                {"op": alu.op_name(op), "negate": bool(negate)})


def reference(x, op, negate=False, kept=1):
    """(P, kept): each partition's elements in `kept` consecutive groups, each group reduced (an
    NKI reduction of the trailing axes keeps the leading ones)."""
    x3 = x.reshape(x.shape[0], kept, -1)
    r = np.asarray(alu.reduce(op)(x3.astype(np.float32), axis=2), np.float32)
    return -r if negate else r


def semantics(state, emit):
    (data,), (dst,) = emit.reads, emit.writes
    state.write(dst, reference(state.read(data), emit.params["op"], emit.params["negate"],
                               dst.free_size).reshape(dst.shape))
