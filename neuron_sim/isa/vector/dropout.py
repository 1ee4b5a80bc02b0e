"""dropout: dst = data where a random draw >= prob, else 0, on VectorE [ISA]. prob is a scalar
or a [P, 1] tensor. The draw is deterministic here (`seed`: nisa calls pass the instruction's
index), not the hardware RNG.
Cost max(64, N) VectorE cycles (one-input instructions [ISAcost])."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ..common import (READ, WRITE, access_latency, check_operands, check_same_shape,
                      check_scalar_operand, make, one_input_cycles, per_partition,
                      stride_factor)

NAME = "dropout"
OPERANDS = {"dst": WRITE, "data": READ, "prob": READ}


def build(chip, dst, data, prob, seed=None):
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, data=data, prob=prob)
    check_same_shape(NAME, "dst", dst, "data", data, chip)
    reads = [data]
    if check_scalar_operand(NAME, "prob", prob, data, chip):
        reads.append(prob)
    cycles = one_input_cycles(chip, data.free_size) * stride_factor(chip, dst, data)
    return make(NAME, Engine.VECTOR, cycles, access_latency(chip, 1 + len(reads)), reads, (dst,),
                {"prob": prob, "seed": int(seed or 0)})


def reference(x, prob, seed=0):
    keep = np.random.default_rng(seed).random(x.shape, dtype=np.float32) >= prob
    return np.where(keep, x, np.float32(0))


def semantics(state, emit):
    x = state.read(emit.reads[0])
    p = per_partition(state, emit.params["prob"], emit.reads[-1], x)
    (dst,) = emit.writes
    state.write(dst, reference(x, p, emit.params["seed"]).reshape(dst.shape))
