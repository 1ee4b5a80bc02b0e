"""nc_matmul: dst[M, N] (PSUM) (+)= stationary[K, M].T @ moving[K, N] on TensorE.

Runs as two ISA instructions, LoadStationary (LS) and MultiplyMoving (MM) [ArchV2][ISA].

Cost (TensorE cycles) [ISAcost] `nc_matmul`, [ArchV2]:
  MM: max(min(64, N_stationary), N_moving), x4 when the operands are FP32.
  LS: N_stationary / 4 ("fast LoadStationary"), loaded in the background while the previous MM
      runs, so TensorE is bound by whichever of LS and MM is longer.
  FP8 double_row (NC-v3+): K = 256 (2 rows per PE) at the BF16 cycle count [ArchV3].
Latency of MM beyond its interval: tensor_mm_latency_extra_cycles (assumption).

Semantics: FP32 products and FP32 accumulation in PSUM; the first write of an accumulation group
overwrites, later ones add [ArchV2]. On NC-v4 PSUM may hold BF16: the old value is widened, the add
is FP32 and the sum is rounded back (RNE) [ArchV4].

NKI's call (`nisa.nc_matmul`, generated from this module): accumulate=None adds where an earlier
instruction wrote dst and overwrites elsewhere, element by element [ISA] (a build given None
overwrites); perf_mode is a name or NKI's matmul_perf_mode; is_stationary_onezero,
is_moving_onezero, tile_position and tile_size are taken but not modelled (a tiled matmul runs
like an untiled one)."""

from __future__ import annotations

from math import ceil

import numpy as np

from ...engines import Engine, Kind
from ...errors import CapabilityError, DtypeError, FreeSizeError, PartitionError, ProgramError
from ...numerics.formats import FLOAT32_FAMILY, FP8, itemsize
from ..common import READ, WRITE, Emit, check_free, check_operands

NAME = "nc_matmul"
# the builder skips the LoadStationary row when the same stationary is still loaded
REUSES_STATIONARY = True
OPERANDS = {"dst": WRITE, "stationary": READ, "moving": READ}
INPUT_DTYPES = ("bfloat16", "float16", "float32", "tfloat32") + FP8
# NKI's arguments that change nothing here (see the module docstring)
UNMODELLED = ("is_stationary_onezero", "is_moving_onezero", "tile_position", "tile_size")


# _check() and the costs by everything they read of the operands (not the tensors' names): a
# kernel repeats a few matmul geometries thousands of times. Of the inputs they read no addresses
# (only dst's, for the PSUM bank), so the key leaves theirs out: a kernel's matmuls take their
# stationaries and movings at hundreds of offsets, and with the offsets in the key the table kept
# overflowing. Only legal geometries are kept (an illegal one raises before it is stored). Bounded.
_CHECKED: dict = {}


def _checked(chip, dst, stationary, moving, perf_mode):
    """(m, n, rows, LS cycles, MM cycles, MM latency cycles, flops) of a legal matmul."""
    key = (id(chip), perf_mode, dst.geometry(), dst.offset, dst.tensor.byte_offset,
           stationary.geometry(), moving.geometry())
    hit = _CHECKED.get(key)
    if hit is not None and hit[0] is chip:
        return hit[1]
    m, n, rows = _check(chip, dst, stationary, moving, perf_mode)
    ls_c, mm_c = cost_cycles(chip, m, n, stationary.dtype in FLOAT32_FAMILY)
    k = stationary.p_size * rows
    out = (m, n, rows, float(ls_c), float(mm_c), float(chip.tensor_mm_latency_extra_cycles),
           float(2.0 * k * m * n))
    if len(_CHECKED) > 4096:
        _CHECKED.clear()
    _CHECKED[key] = (chip, out)
    return out


def _check(chip, dst, stationary, moving, perf_mode):
    check_operands(NAME, chip, Engine.TENSOR, stationary=stationary, moving=moving, dst=dst)
    for nm, ap in (("stationary", stationary), ("moving", moving)):
        if ap.dtype not in INPUT_DTYPES or (ap.dtype == "float8_e4m3fn" and not chip.has_mx_matmul):
            raise DtypeError(NAME, nm, f"one of {INPUT_DTYPES} (float8_e4m3fn from NC-v4)",
                             ap.dtype, chip.name)
    allowed_out = ("float32", "bfloat16") if chip.has_bf16_psum else ("float32",)
    if dst.dtype not in allowed_out:
        raise DtypeError(NAME, "dst", f"PSUM output dtype in {allowed_out}", dst.dtype, chip.name,
                         "BF16 PSUM output needs NC-v4" if dst.dtype == "bfloat16" else "")
    f32 = [ap.dtype in FLOAT32_FAMILY for ap in (stationary, moving)]
    if any(f32) and not all(f32):
        raise DtypeError(NAME, "moving" if f32[0] else "stationary",
                         "FP32/TF32 like the other operand (if either operand is FP32/TF32, both "
                         "must be)", f"{stationary.dtype} x {moving.dtype}", chip.name)
    if stationary.p_size != moving.p_size:
        raise PartitionError(NAME, "moving", f"K = {stationary.p_size} partitions like stationary",
                             moving.p_size, chip.name)
    rows = 2 if perf_mode == "double_row" else 1
    m = stationary.free_size // rows
    n = moving.free_size // rows
    check_free(NAME, "stationary", m, chip.matmul_stationary_fmax, chip, "stationary free size",
               f"tile M into blocks of {chip.matmul_stationary_fmax}")
    check_free(NAME, "moving", n, chip.matmul_moving_fmax(dst.dtype), chip, "moving free size",
               f"tile N into blocks of one PSUM bank ({chip.psum_bank_fp32_elems} FP32)")
    check_psum_bank(NAME, dst, chip)
    if dst.p_size != m or dst.free_size != n:
        raise PartitionError(NAME, "dst", f"shape [{m}, {n}] (M on partitions)", list(dst.shape),
                             chip.name)
    if perf_mode == "double_row":
        if not chip.has_fp8_double_row:
            raise CapabilityError(NAME, "perf_mode", "a chip with FP8 double_row", "double_row",
                                  chip.name, "double_row needs NeuronCore-v3 or newer")
        if stationary.dtype not in FP8 or moving.dtype not in FP8:
            raise DtypeError(NAME, "moving", "FP8 operands for double_row",
                             f"{stationary.dtype} x {moving.dtype}", chip.name)
    elif perf_mode not in (None, "none"):
        raise CapabilityError(NAME, "perf_mode", "None or 'double_row'", perf_mode, chip.name)
    return m, n, rows


def _perf_mode(perf_mode):
    """None or 'double_row', from a name or NKI's matmul_perf_mode member."""
    mode = getattr(perf_mode, "value", perf_mode)
    return None if mode in (None, "none") else mode


def check_views(stationary, moving, perf_mode=None, **_):
    """NKI's double_row layout on the kernel's views (before access patterns merge dimensions):
    the first free dimension holds the second contraction row, [K, 2, M] and [K, 2, N] [ISA]."""
    if perf_mode is None or _perf_mode(perf_mode) != "double_row":
        return
    for nm, x in (("stationary", stationary), ("moving", moving)):
        if x.ndim < 3 or x.shape[1] != 2:
            raise ProgramError(f"{NAME}: perf_mode=double_row needs {nm} shaped [K, 2, ...] (the "
                               "first free dimension holds the second contraction row), got "
                               f"{list(x.shape)}")


def check_psum_bank(instr, dst, chip):
    """An accumulation group lives in one 2 KiB PSUM bank per partition [ArchV2][Tile]; NC-v4's
    larger moving sizes may span consecutive banks from a bank boundary [ISA]."""
    bank = chip.psum_bank_bytes_per_partition
    lo = dst.tensor.byte_offset + dst.box()[2] * itemsize(dst.dtype)
    hi = dst.tensor.byte_offset + dst.box()[3] * itemsize(dst.dtype)
    if chip.matmul_spans_psum_banks:
        ok = (hi - lo) <= bank or lo % bank == 0
    else:
        ok = lo // bank == (hi - 1) // bank
    if not ok:
        raise FreeSizeError(instr, "dst", f"an accumulation group inside one {bank} B PSUM bank "
                            "per partition", f"bytes {lo}..{hi} of the partition", chip.name,
                            "start the output tile on a bank boundary")


def cost_cycles(chip, n_stationary, n_moving, fp32):
    """(LS cycles, MM cycles): documented formulas, see module docstring."""
    mult = chip.fp32_matmul_cost_multiplier if fp32 else 1
    mm = max(min(chip.mm_init_latency_cycles, n_stationary), n_moving) * mult
    ls = ceil(n_stationary / chip.fast_load_stationary_speedup) * mult
    return ls, mm


def build(chip, dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
          is_transpose=False, accumulate=None, tile_position=(), tile_size=(), perf_mode=None):
    perf_mode = _perf_mode(perf_mode)
    _, _, rows, ls_c, mm_c, lat, flops = _checked(chip, dst, stationary, moving, perf_mode)
    params = {"accumulate": bool(accumulate), "rows": rows, "is_transpose": bool(is_transpose)}
    # Emit(...) as make() would build it (the memo holds its values already converted)
    ls = Emit("load_stationary", _TENSOR, _LS, ls_c, 0.0, (stationary,), (), params, 0.0, None)
    mm = Emit(NAME, _TENSOR, _MM, mm_c, lat, (stationary, moving), (dst,), params, flops, None)
    return ls, mm


_TENSOR, _LS, _MM = int(Engine.TENSOR), int(Kind.LOAD_STATIONARY), int(Kind.MULTIPLY_MOVING)


def reference(stationary, moving, acc=None):
    """NumPy reference: stationary [K, M], moving [K, N] (FP32 values) -> FP32 [M, N] (+ acc).
    Products are exact in FP64 and the sum is rounded once to FP32, a stand-in for the PE
    array's FP32 accumulation."""
    s = np.asarray(stationary, np.float64)
    mv = np.asarray(moving, np.float64)
    out = (s.T @ mv).astype(np.float32)
    return out if acc is None else (np.asarray(acc, np.float32) + out).astype(np.float32)


def semantics(state, emit):
    if emit.name != NAME:
        return  # LoadStationary has no architectural effect of its own
    stationary, moving = emit.reads
    (dst,) = emit.writes
    rows = emit.params["rows"]
    s = state.read(stationary)
    mv = state.read(moving)
    if rows == 2:       # [K, 2, F]: the second contraction row after the first, [2K, F]
        s, mv = (np.concatenate(x.reshape(x.shape[0], 2, -1).swapaxes(0, 1)) for x in (s, mv))
    out = reference(s.reshape(s.shape[0], -1), mv.reshape(mv.shape[0], -1))
    if emit.params["accumulate"]:
        out = state.read(dst).reshape(out.shape) + out
    state.write(dst, out.reshape(dst.shape))
