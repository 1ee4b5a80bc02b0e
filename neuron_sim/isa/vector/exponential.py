"""exponential (NC-v4 VectorE): dst = exp(src - max_value), max_value a number or [P, 1]; the row
sums fold into VectorE's accumulator registers by reduce_cmd (NKI's default idle leaves them),
read out to reduce_res [ISA]. 4x the rate of ScalarE exp [ArchV4]: cost max(64, N/4) VectorE
cycles (derived)."""

from __future__ import annotations

from math import ceil

import numpy as np

from ...engines import Engine
from ...errors import CapabilityError
from .. import alu
from ..common import (READ, WRITE, access_latency, check_operands, check_scalar_operand, make,
                      per_partition)

NAME = "exponential"
PURE = True
OPERANDS = {"dst": WRITE, "src": READ, "max_value": READ, "reduce_res": WRITE}


SAME_SHAPE = ("dst", "src")     # [ISA]; the NKI front end checks it


def build(chip, dst, src, max_value=0.0, reduce_res=None, reduce_cmd="idle", reduce_init=0.0):
    if not chip.has_vector_exponential:
        raise CapabilityError(NAME, "src", "a chip with VectorE exponential (NC-v4)",
                              "exponential on VectorE", chip.name,
                              "use activation(op='exp') on ScalarE with bias=-max")
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, src=src, max_value=max_value,
                   reduce_res=reduce_res)
    reads = [src]
    if check_scalar_operand(NAME, "max_value", max_value, src, chip):
        reads.append(max_value)
    writes = [dst] if reduce_res is None else [dst, reduce_res]
    n = src.free_size
    c = max(chip.min_ii_cycles, ceil(n / chip.vector_exp_speedup_vs_scalar))
    return make(NAME, Engine.VECTOR, c, access_latency(chip, 2 + (reduce_res is not None)),
                reads, writes, {"max_value": max_value,
                                "reduce_cmd": getattr(reduce_cmd, "value", reduce_cmd),
                                "reduce_init": reduce_init})


def reference(x, m=0.0):
    with np.errstate(all="ignore"):
        return np.exp(x.astype(np.float32) - np.float32(m) if np.isscalar(m)
                      else x - m).astype(np.float32)


def semantics(state, emit):
    """dst, and the row sums folded into VectorE's accumulator registers by reduce_cmd (idle:
    untouched), read out to reduce_res."""
    x = state.read(emit.reads[0])
    p = emit.params
    y = reference(x, per_partition(state, p["max_value"], emit.reads[-1], x))
    regs = alu.accumulate(state.accumulator(Engine.VECTOR), x.shape[0],
                          y.reshape(y.shape[0], -1).sum(axis=1), p["reduce_cmd"], "add",
                          p["reduce_init"])
    state.write(emit.writes[0], y.reshape(emit.writes[0].shape))
    if len(emit.writes) > 1:
        state.write(emit.writes[1], regs.reshape(emit.writes[1].shape))
