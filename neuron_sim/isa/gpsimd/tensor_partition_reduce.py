"""tensor_partition_reduce (GpSimd): reduce across partitions, dst[1, F] = reduce_p data[P, F].
Cost: no documented formula; 150 + N * ceil(P / 16) GpSimd cycles (gpsimd_elementwise_cycles
assumption: each of the 8 cores walks its 16 partitions)."""

from __future__ import annotations

from math import ceil

import numpy as np

from ...engines import Engine
from ...errors import FreeSizeError
from .. import alu
from ..common import READ, WRITE, access_latency, check_operands, make

NAME = "tensor_partition_reduce"
OPERANDS = {"dst": WRITE, "data": READ}


def build(chip, dst, op, data):
    alu.reduce(op)
    check_operands(NAME, chip, Engine.GPSIMD, dst=dst, data=data)
    if dst.p_size != 1 or dst.free_size != data.free_size:
        raise FreeSizeError(NAME, "dst", f"shape [1, {data.free_size}]", list(dst.shape), chip.name)
    rows_per_core = ceil(data.p_size / chip.gpsimd_partitions_per_core)
    c = chip.gpsimd_start_cycles + data.free_size * rows_per_core
    return make(NAME, Engine.GPSIMD, c, access_latency(chip, 2), (data,), (dst,),
                {"op": alu.op_name(op)})


def reference(x, op):
    x2 = x.reshape(x.shape[0], -1)
    return np.asarray(alu.reduce(op)(x2, axis=0), np.float32)[None, :]


def semantics(state, emit):
    (data,), (dst,) = emit.reads, emit.writes
    state.write(dst, reference(state.read(data), emit.params["op"]).reshape(dst.shape))
