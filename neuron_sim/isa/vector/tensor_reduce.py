"""tensor_reduce: dst = reduce(op) of data along its trailing free elements, dst's free size
groups per partition (dst [P, 1]: all of them), optionally negated.

Cost [ISAcost]: N VectorE cycles; N/2 when input and output are BF16 and op is add or max;
never below MIN_II = 64."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from .. import alu
from ..common import access_latency, check_engine_operand, is16, make

NAME = "tensor_reduce"


def build(chip, dst, data, op, negate=False, engine=Engine.VECTOR):
    alu.reduce(op)
    check_engine_operand(NAME, "dst", dst, engine, chip)
    check_engine_operand(NAME, "data", data, engine, chip)
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
