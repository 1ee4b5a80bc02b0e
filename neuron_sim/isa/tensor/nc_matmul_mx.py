"""nc_matmul_mx (NC-v4): MXFP8/MXFP4 matmul with E8M0 block scales.

Data are x4-packed types (4 values per element along K), so one instruction contracts K = 128
partitions x 4 = 512; scales are one E8M0 per 32 values = 8 partitions x 4 [ArchV4][ISA].
Cost: the cycles of a BF16 matmul with the same free sizes (4x the BF16 rate) [ArchV4]; the scale
reads add no TensorE cycles (assumption in the data sheet, §5).
Semantics: value = element x 2^(scale - 127), products and accumulation in FP32."""

from __future__ import annotations

import numpy as np

from ...engines import Engine, Kind
from ...errors import CapabilityError, DtypeError
from ...numerics.formats import MX_PACKED
from ...program.ap import Memory
from ..common import check_free, check_memory, check_partitions, make
from .nc_matmul import cost_cycles

NAME = "nc_matmul_mx"


def build(chip, dst, stationary, moving, stationary_scale, moving_scale, *, accumulate=False):
    if not chip.has_mx_matmul:
        raise CapabilityError(NAME, "stationary", "a chip with MX matmul (NC-v4, Trn3)",
                              "nc_matmul_mx", chip.name, "use nc_matmul with BF16 or FP8")
    for nm, ap in (("stationary", stationary), ("moving", moving)):
        check_partitions(NAME, nm, ap, chip)
        check_memory(NAME, nm, ap, (Memory.SBUF,), Engine.TENSOR, chip)
        if ap.dtype not in MX_PACKED:
            raise DtypeError(NAME, nm, f"an x4-packed MX type {MX_PACKED}", ap.dtype, chip.name)
    for nm, ap in (("stationary_scale", stationary_scale), ("moving_scale", moving_scale)):
        check_memory(NAME, nm, ap, (Memory.SBUF,), Engine.TENSOR, chip)
        if ap.dtype not in ("uint8", "float8_e8m0fnu"):
            raise DtypeError(NAME, nm, "uint8/float8_e8m0fnu E8M0 scales", ap.dtype, chip.name)
    check_memory(NAME, "dst", dst, (Memory.PSUM,), Engine.TENSOR, chip,
                 "TensorE writes only PSUM")
    m, n = stationary.free_size, moving.free_size
    check_free(NAME, "stationary", m, chip.matmul_stationary_fmax, chip, "stationary free size")
    check_free(NAME, "moving", n, chip.matmul_moving_fmax(dst.dtype), chip, "moving free size")
    ls_c, mm_c = cost_cycles(chip, m, n, fp32=False)
    k = stationary.p_size * 4
    params = {"accumulate": bool(accumulate)}
    ls = make("load_stationary", Engine.TENSOR, ls_c, 0, (stationary, stationary_scale), (),
              params, kind=Kind.LOAD_STATIONARY)
    mm = make(NAME, Engine.TENSOR, mm_c, chip.tensor_mm_latency_extra_cycles,
              (stationary, moving, stationary_scale, moving_scale), (dst,), params,
              kind=Kind.MULTIPLY_MOVING, flops=2.0 * k * m * n)
    return ls, mm


def dequantize(data4, scale):
    """data4 [P, F, 4] FP32 values, scale [P/8, F] E8M0 codes -> [P*4, F] FP32 with K = p*4 + j."""
    p, f, _ = data4.shape
    s = np.exp2(np.asarray(scale, np.float32).reshape(p // 8, f) - 127.0)
    vals = data4 * np.repeat(s, 8, axis=0)[:, :, None]
    return vals.transpose(0, 2, 1).reshape(p * 4, f)


def reference(stat4, mov4, stat_scale, mov_scale, acc=None):
    s = dequantize(stat4, stat_scale).astype(np.float64)
    m = dequantize(mov4, mov_scale).astype(np.float64)
    out = (s.T @ m).astype(np.float32)
    return out if acc is None else acc + out


def semantics(state, emit):
    if emit.name != NAME:
        return
    st, mv, st_s, mv_s = emit.reads
    (dst,) = emit.writes
    out = reference(state.read_packed(st), state.read_packed(mv), state.read_raw(st_s),
                    state.read_raw(mv_s))
    if emit.params["accumulate"]:
        out = state.read(dst).reshape(out.shape) + out
    state.write(dst, out.reshape(dst.shape))
