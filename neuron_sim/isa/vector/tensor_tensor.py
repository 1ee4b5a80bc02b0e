"""tensor_tensor: dst = data1 <op> data2, element-wise, on VectorE (or GpSimd).

Cost (VectorE cycles) [ISAcost][ArchV3]: max(64, 2N) (two input streams);
  max(64, N) when one input is in PSUM and the other in SBUF (documented for NC-v2; C8's 10.55%
  VectorE activity, 4096 such adds of [128, 512] FP32 in 28.3 ms, shows it holds on NC-v3);
  NC-v3+: max(64, N) when all three tensors are BF16/FP16 in SBUF (performance mode).
  GpSimd: 150 + N (gpsimd_elementwise_cycles assumption).
Innermost stride > 16 B doubles the cost [ArchV2]."""

from __future__ import annotations

from ...engines import Engine
from ...program.ap import Memory
from .. import alu
from ..common import (READ, WRITE, access_latency, check_not_both_psum, check_operands,
                      check_same_partitions, contiguous, is16, make, stride_factor)

NAME = "tensor_tensor"
PURE = True


def cost_cycles(chip, dst, a, b, engine):
    n = dst.free_size
    if engine == Engine.GPSIMD:
        return chip.gpsimd_start_cycles + n
    per_elem = 2
    if (a.memory == Memory.PSUM) != (b.memory == Memory.PSUM):
        per_elem = 1
    if chip.has_vector_perf_modes and all(is16(x) and x.memory == Memory.SBUF and contiguous(x)
                                          for x in (dst, a, b)):
        per_elem = 1
    return max(chip.min_ii_cycles, per_elem * n) * stride_factor(chip, dst, a, b)


ENGINES = (Engine.VECTOR, Engine.GPSIMD)
OPERANDS = {"dst": WRITE, "data1": READ, "data2": READ}
# operands of one shape [ISA]: the NKI front end checks it; the lowering's tiles may pair a
# shorter operand (its cost is the dst's size)
SAME_SHAPE = ("dst", "data1", "data2")


def default_engine(chip, dst, data1, data2, op, **_):
    """The compiler's choice when a kernel leaves the engine open: GpSimd for pow and for
    int32/uint32 operands (exact integer arithmetic), unless one is in PSUM (GpSimd has no PSUM
    port); else VectorE."""
    aps = (dst, data1, data2)
    if any(ap.memory == Memory.PSUM for ap in aps):
        return Engine.VECTOR
    ints = all(ap.dtype in ("int32", "uint32") for ap in aps)
    return Engine.GPSIMD if ints or alu.op_name(op) == "power" else Engine.VECTOR


def build(chip, dst, data1, data2, op, engine=Engine.VECTOR):
    alu.binary(op)
    check_operands(NAME, chip, engine, dst=dst, data1=data1, data2=data2)
    check_same_partitions(NAME, "dst", dst, "data1", data1, chip)
    check_same_partitions(NAME, "dst", dst, "data2", data2, chip)
    check_not_both_psum(NAME, "data1", data1, "data2", data2, chip)
    return make(NAME, engine, cost_cycles(chip, dst, data1, data2, engine), access_latency(chip, 3),
                (data1, data2), (dst,), {"op": alu.op_name(op)})


def reference(a, b, op):
    return alu.apply(op, a, b)


def semantics(state, emit):
    a, b = emit.reads
    (dst,) = emit.writes
    op = emit.params["op"]
    if op in alu.BITVEC:        # on the integer values, exactly (FP32 would round above 2^24)
        x = state.read_raw(a)
        state.write(dst, alu.binary(op)(x, state.read_raw(b).reshape(x.shape)).reshape(dst.shape))
        return
    x = state.read(a)
    state.write(dst, reference(x, state.read(b).reshape(x.shape), op).reshape(dst.shape))
