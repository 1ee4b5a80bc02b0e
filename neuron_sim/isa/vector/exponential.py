"""exponential (NC-v4 VectorE): dst = exp(data - max_value), optionally the row sum into
reduce_res. 4x the rate of ScalarE exp [ArchV4]: cost max(64, N/4) VectorE cycles (derived)."""

from __future__ import annotations

from math import ceil

import numpy as np

from ...engines import Engine
from ...errors import CapabilityError
from ..common import access_latency, check_engine_operand, make

NAME = "exponential"


def build(chip, dst, data, max_value=0.0, reduce_res=None):
    if not chip.has_vector_exponential:
        raise CapabilityError(NAME, "data", "a chip with VectorE exponential (NC-v4)",
                              "exponential on VectorE", chip.name,
                              "use activation(op='exp') on ScalarE")
    check_engine_operand(NAME, "dst", dst, Engine.VECTOR, chip)
    check_engine_operand(NAME, "data", data, Engine.VECTOR, chip)
    reads = [data]
    if not isinstance(max_value, (int, float)):
        reads.append(max_value)
    writes = [dst] + ([reduce_res] if reduce_res is not None else [])
    n = data.free_size
    c = max(chip.min_ii_cycles, ceil(n / chip.vector_exp_speedup_vs_scalar))
    return make(NAME, Engine.VECTOR, c, access_latency(chip, 2 + (reduce_res is not None)),
                reads, writes, {"max_value": max_value})


def reference(x, m=0.0):
    with np.errstate(all="ignore"):
        return np.exp(x.astype(np.float32) - np.float32(m) if np.isscalar(m)
                      else x - m).astype(np.float32)


def semantics(state, emit):
    data = emit.reads[0]
    x = state.read(data)
    m = emit.params["max_value"]
    if not isinstance(m, (int, float)):
        m = state.read(emit.reads[1]).reshape((x.shape[0],) + (1,) * (x.ndim - 1))
    y = reference(x, m)
    state.write(emit.writes[0], y.reshape(emit.writes[0].shape))
    if len(emit.writes) > 1:
        state.write(emit.writes[1], y.reshape(y.shape[0], -1).sum(axis=1).reshape(
            emit.writes[1].shape))
