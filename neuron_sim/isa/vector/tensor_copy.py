"""tensor_copy: dst = src (with a dtype cast), on VectorE, ScalarE (NC-v3+) or GpSimd.

Cost [ISAcost][ArchV3][ArchV4]: max(64, N) on VectorE/ScalarE with the NC-v3 VectorE performance
modes (N/4, N/2) and the NC-v4 ScalarE 2x for BF16/FP16; GpSimd 150 + N. GpSimd cannot reach PSUM
[ISA]. Copies between equal types are bit-exact on VectorE/GpSimd [ISAcost]."""

from __future__ import annotations

from ...engines import Engine
from ...errors import CapabilityError
from ..common import (READ, WRITE, access_latency, check_operands, check_same_partitions, make,
                      one_input_engine_cycles)

NAME = "tensor_copy"
PURE = True
OPERANDS = {"dst": WRITE, "src": READ}


def build(chip, dst, src, engine=Engine.VECTOR):
    if engine == Engine.SCALAR and not chip.has_scalar_v3_ops:
        raise CapabilityError(NAME, "engine", "VectorE or GpSimd (ScalarE copies need "
                              "NeuronCore-v3+)", "ScalarE", chip.name,
                              "use activation(op=copy) on ScalarE instead")
    check_operands(NAME, chip, engine, dst=dst, src=src)
    check_same_partitions(NAME, "dst", dst, "src", src, chip)
    return make(NAME, engine, one_input_engine_cycles(chip, dst, src, engine),
                access_latency(chip, 2), (src,), (dst,))


def reference(x):
    return x


def semantics(state, emit):
    (src,), (dst,) = emit.reads, emit.writes
    state.write(dst, state.read(src).reshape(dst.shape), exact_from=src)
