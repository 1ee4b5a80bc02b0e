"""tensor_copy: dst = src (with a dtype cast), on VectorE, ScalarE or GpSimd.

Cost [ISAcost][ArchV3][ArchV4]: max(64, N) on VectorE/ScalarE with the NC-v3 VectorE performance
modes (N/4, N/2) and the NC-v4 ScalarE 2x for BF16/FP16; GpSimd 150 + N. GpSimd cannot reach PSUM
[ISA]. Copies between equal types are bit-exact on VectorE/GpSimd [ISAcost]."""

from __future__ import annotations

from ...engines import Engine
from ..common import (access_latency, check_engine_operand, check_same_partitions, is16, make,
                      one_input_cycles, stride_factor, vector_perf_divisor)

NAME = "tensor_copy"


def cost_cycles(chip, dst, src, engine):
    n = dst.free_size
    if engine == Engine.GPSIMD:
        return chip.gpsimd_start_cycles + n
    if engine == Engine.SCALAR:
        div = 2.0 if (chip.has_scalar_tensor_scalar and is16(dst) and is16(src)) else 1.0
    else:
        div = vector_perf_divisor(chip, dst, src)
    return one_input_cycles(chip, n, div) * stride_factor(dst, src)


def build(chip, dst, src, engine=Engine.VECTOR):
    check_engine_operand(NAME, "dst", dst, engine, chip)
    check_engine_operand(NAME, "src", src, engine, chip)
    check_same_partitions(NAME, "dst", dst, "src", src, chip)
    return make(NAME, engine, cost_cycles(chip, dst, src, engine), access_latency(chip, 2),
                (src,), (dst,))


def reference(x):
    return x


def semantics(state, emit):
    (src,), (dst,) = emit.reads, emit.writes
    state.write(dst, state.read(src).reshape(dst.shape), exact_from=src)
