"""quantize_mx (NC-v4 VectorE): BF16/FP16/FP32 values -> MXFP8 (x4-packed) data plus E8M0 scales,
one scale per 32 values = 8 partitions x 4 elements [ArchV4][ISA].
Cost: 4 elements per partition per cycle [ArchV4] -> max(64, N/4) VectorE cycles (derived)."""

from __future__ import annotations

from math import ceil

import numpy as np

from ...engines import Engine
from ...errors import CapabilityError, DtypeError, PartitionError
from ...numerics.formats import np_dtype
from ...numerics.rounding import quantize_mx as _quantize
from ..common import access_latency, check_engine_operand, make

NAME = "quantize_mx"
OUT = {"float8_e4m3fn_x4": "float8_e4m3fn", "float8_e5m2_x4": "float8_e5m2"}


def build(chip, dst, scale, data):
    if not chip.has_mx_matmul:
        raise CapabilityError(NAME, "dst", "a chip with MX support (NC-v4)", "quantize_mx",
                              chip.name)
    for nm, ap in (("dst", dst), ("scale", scale), ("data", data)):
        check_engine_operand(NAME, nm, ap, Engine.VECTOR, chip)
    if dst.dtype not in OUT:
        raise DtypeError(NAME, "dst", f"one of {tuple(OUT)}", dst.dtype, chip.name)
    if data.p_size % 8 or data.free_size != 4 * dst.free_size or scale.p_size * 8 != data.p_size:
        raise PartitionError(NAME, "data", "[P, 4F] with P a multiple of 8 for dst [P, F] and "
                             "scale [P/8, F]", list(data.shape), chip.name)
    n = data.free_size
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, ceil(n / 4)),
                access_latency(chip, 3), (data,), (dst, scale))


def reference(x, elem_dtype):
    """x [P, F, 4] -> (elements [P, F, 4], scales [P/8, F]) with blocks of 8 partitions x 4."""
    p, f, _ = x.shape
    blocks = x.reshape(p // 8, 8, f, 4).transpose(0, 2, 1, 3).reshape(p // 8, f, 32)
    elems, scales = _quantize(blocks, elem_dtype)
    elems = elems.reshape(p // 8, f, 8, 4).transpose(0, 2, 1, 3).reshape(p, f, 4)
    return elems, scales.reshape(p // 8, f)


def semantics(state, emit):
    (data,) = emit.reads
    dst, scale = emit.writes
    x = state.read(data).reshape(data.p_size, -1, 4)
    elems, scales = reference(x, OUT[dst.dtype])
    state._view(dst, packed=True)[...] = elems.astype(np_dtype(dst.dtype)).reshape(
        state._view(dst, packed=True).shape)
    state.write_raw(scale, scales.astype(np.uint8).view(np_dtype(scale.dtype)))
