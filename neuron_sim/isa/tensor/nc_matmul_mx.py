"""nc_matmul_mx (NC-v4): dst[M, N] (PSUM) (+)= MXFP8/MXFP4 stationary.T @ moving with E8M0 block
scales, dequantized inside TensorE [ArchV4][ISA] nc_matmul_mx.

Operands: stationary [K, M] and moving [K, N] in x4-packed types (float8_e4m3fn_x4,
float8_e5m2_x4, float4_e2m1fn_x4; the two may differ), K a multiple of 32 partitions; the
contraction runs over the partitions and the 4 values of each element, so one instruction
contracts up to 128 x 4 = 512. Scales (uint8/float8_e8m0fnu codes) are laid out as quantize_mx
writes them (`quantize_mx.scale_rows`). M <= 128 and even; N <= one PSUM bank of dst's dtype
(512 FP32, 1024 BF16). Row tiling only: tile_size (rows, 128) with rows 128/64/32, tile_position
(a multiple of rows, 0); as for nc_matmul, the tiles' parallelism is not timed.
Cost: the cycles of a BF16 matmul with the same free sizes, hence 4x the BF16 rate [ArchV4]
("4x the throughput"; each PE multiplies 4 pairs per cycle); the scale reads add no TensorE
cycles (assumption, data sheet §5).
Semantics: value = element x 2^(code - 127); products and accumulation in FP32 (exact products,
one rounding, as nc_matmul's reference); BF16 dst rounds the result (RNE)."""

from __future__ import annotations

import numpy as np

from ...engines import Engine, Kind
from ...errors import CapabilityError, DtypeError, FreeSizeError, PartitionError
from ...numerics.formats import MX_PACKED, itemsize
from ...numerics.rounding import dequantize_mx
from ..common import READ, WRITE, check_free, check_operands, make
from ..vector.quantize_mx import SCALES, check_data_partitions, check_scale, scale_rows
from .nc_matmul import check_psum_bank, cost_cycles

NAME = "nc_matmul_mx"
_SCALES = SCALES._replace(role="read")      # laid out as quantize_mx writes them
OPERANDS = {"dst": WRITE, "stationary": READ, "moving": READ, "stationary_scale": _SCALES,
            "moving_scale": _SCALES}
OUT = ("float32", "bfloat16")


def _check_tiling(chip, stationary, tile_position, tile_size):
    if not tile_position and not tile_size:
        return
    if not (tile_position and tile_size):
        raise PartitionError(NAME, "tile_position", "tile_position and tile_size set together",
                             f"tile_position={tile_position}, tile_size={tile_size}", chip.name)
    rows, cols = (int(x) for x in tile_size)
    row_sizes = chip.pe_row_tile_sizes
    if rows not in row_sizes or cols != chip.pe_cols:
        raise PartitionError(NAME, "tile_size", f"(rows, {chip.pe_cols}) with rows in {row_sizes} "
                             "(row tiling only)", tuple(tile_size), chip.name)
    start_row, start_col = (int(x) for x in tile_position)
    if start_row % rows or not 0 <= start_row < chip.pe_rows or start_col != 0:
        raise PartitionError(NAME, "tile_position", f"(a multiple of {rows} below {chip.pe_rows}"
                             ", 0)", tuple(tile_position), chip.name)
    if stationary.p_size > rows:
        raise PartitionError(NAME, "stationary", f"at most {rows} partitions (tile_size rows)",
                             stationary.p_size, chip.name)


def build(chip, dst, stationary, moving, stationary_scale, moving_scale, tile_position=None,
          tile_size=None, accumulate=None):
    if not chip.has_mx_matmul:
        raise CapabilityError(NAME, "stationary", "NeuronCore-v4 or newer (Trn3): nc_matmul_mx "
                              "is available only there", f"NeuronCore-v{chip.neuroncore_version}",
                              chip.name, "use nc_matmul with BF16 or FP8 operands, or target trn3")
    check_operands(NAME, chip, Engine.TENSOR, stationary=stationary, moving=moving, dst=dst,
                   stationary_scale=stationary_scale, moving_scale=moving_scale)
    for nm, ap in (("stationary", stationary), ("moving", moving)):
        if ap.dtype not in MX_PACKED:
            raise DtypeError(NAME, nm, f"an x4-packed MX type {MX_PACKED}", ap.dtype, chip.name,
                             "quantize BF16/FP16 tiles with quantize_mx")
        check_data_partitions(NAME, nm, ap, chip)
    if stationary.p_size != moving.p_size:
        raise PartitionError(NAME, "moving", f"K = {stationary.p_size} partitions like "
                             "stationary", moving.p_size, chip.name)
    if dst.dtype not in OUT:
        raise DtypeError(NAME, "dst", f"PSUM output dtype in {OUT}", dst.dtype, chip.name)
    m, n = stationary.free_size, moving.free_size
    check_free(NAME, "stationary", m, chip.matmul_stationary_fmax, chip, "stationary free size",
               f"tile M into blocks of {chip.matmul_stationary_fmax}")
    if m % 2:
        raise FreeSizeError(NAME, "stationary", "an even free size", m, chip.name)
    bank = chip.psum_bank_bytes_per_partition // int(itemsize(dst.dtype))
    check_free(NAME, "moving", n, bank, chip, f"moving free size (one PSUM bank of {dst.dtype})",
               f"tile N into blocks of {bank}")
    check_psum_bank(NAME, dst, chip)
    if dst.p_size != m or dst.free_size != n:
        raise PartitionError(NAME, "dst", f"shape [{m}, {n}] (M on partitions)",
                             [dst.p_size, dst.free_size], chip.name)
    check_scale(NAME, "stationary_scale", stationary_scale, stationary.p_size, m, chip)
    check_scale(NAME, "moving_scale", moving_scale, moving.p_size, n, chip)
    _check_tiling(chip, stationary, tile_position, tile_size)
    ls_c, mm_c = cost_cycles(chip, m, n, fp32=False)
    k = stationary.p_size * 4
    params = {"accumulate": bool(accumulate),
              "scale_rows": tuple(int(r) for r in scale_rows(stationary.p_size, chip))}
    ls = make("load_stationary", Engine.TENSOR, ls_c, 0, (stationary, stationary_scale), (),
              params, kind=Kind.LOAD_STATIONARY)
    mm = make(NAME, Engine.TENSOR, mm_c, chip.tensor_mm_latency_extra_cycles,
              (stationary, moving, stationary_scale, moving_scale), (dst,), params,
              kind=Kind.MULTIPLY_MOVING, flops=2.0 * k * m * n)
    return ls, mm


def dequantize(data4, codes):
    """data4 [P, F, 4] element values, codes [P/g, F] E8M0 (one row per group of g partitions)
    -> [P, F, 4] FP32 values."""
    codes = np.asarray(codes)
    v = dequantize_mx(np.moveaxis(data4, 0, -1), codes.T[:, None], len(data4) // len(codes))
    return np.moveaxis(v, -1, 0)


def reference(stat4, mov4, stat_codes, mov_codes):
    """stationary [K, M, 4], moving [K, N, 4] element values and their group codes -> FP32
    [M, N] = sum over partitions and lanes of the dequantized products."""
    s = dequantize(stat4, stat_codes).astype(np.float64)
    m = dequantize(mov4, mov_codes).astype(np.float64)
    return np.einsum("kiq,kjq->ij", s, m).astype(np.float32)


def semantics(state, emit):
    if emit.name != NAME:
        return
    st, mv, st_s, mv_s = emit.reads
    (dst,) = emit.writes
    rows = list(emit.params["scale_rows"])
    codes = [np.asarray(state.read_raw(s)).view(np.uint8).reshape(s.p_size, -1)[rows]
             for s in (st_s, mv_s)]
    out = reference(state.read_packed(st).reshape(st.p_size, -1, 4),
                    state.read_packed(mv).reshape(mv.p_size, -1, 4), *codes)
    if emit.params["accumulate"]:
        out = state.read(dst).reshape(out.shape) + out
    state.write(dst, out.reshape(dst.shape))
