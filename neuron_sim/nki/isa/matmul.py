"""TensorE: ``nc_matmul`` (its PSUM write mask and accumulation need the kernel's views);
``nc_transpose`` is made from its ISA module (_generic.py)."""

from __future__ import annotations

import numpy as np

from ...isa.tensor import nc_matmul as core_matmul
from .. import dtypes
from ._common import _Ctx
from ..tensor import NkiTensor
from .enums import matmul_perf_mode


_FP8 = (dtypes.float8_e4m3, dtypes.float8_e5m2, dtypes.float8_e4m3fn)


def _mm_checks(ctx, dst, stationary, moving, rows=1):
    """rows=2 is FP8 double_row: the contraction is the partitions times the first free
    dimension, which must be 2 ([128, 2, M] stationary, [128, 2, N] moving) [ISA]."""
    ctx.onchip(stationary, "stationary", ("sbuf",))
    ctx.onchip(moving, "moving", ("sbuf",))
    ctx.onchip(dst, "dst", ("psum",))
    t = ctx.chip
    if rows == 2:
        for nm, x in (("stationary", stationary), ("moving", moving)):
            if x.ndim < 3 or x.shape[1] != 2:
                ctx.fail(f"perf_mode=double_row needs {nm} shaped [K, 2, ...] (the first free dimension "
                         f"holds the second contraction row), got {list(x.shape)}")
            if dtypes.normalize(x.dtype) not in _FP8:
                ctx.fail(f"perf_mode=double_row needs FP8 operands; {nm} is {x.storage.dtype_name}")
    K, M = stationary.num_partitions, stationary.free_size // rows
    K2, N = moving.num_partitions, moving.free_size // rows
    if K != K2:
        ctx.fail(f"stationary and moving must have the same partition (contraction) size: {K} vs {K2}")
    if M > t.matmul_stationary_fmax:
        ctx.fail(f"stationary free size {M} exceeds the {t.matmul_stationary_fmax} columns of the PE array "
                 "(nl.tile_size.gemm_stationary_fmax); tile M")
    out_bf16 = dtypes.normalize(dst.dtype) == dtypes.bfloat16
    nmax = t.matmul_moving_fmax_bf16_out if out_bf16 else t.matmul_moving_fmax_fp32_out
    if N > nmax:
        ctx.fail(f"moving free size {N} exceeds {nmax} (nl.tile_size.gemm_moving_fmax: one PSUM bank of "
                 f"{t.psum_bank_fp32_elems} float32 per partition); tile N")
    if dst.num_partitions != M or dst.free_size != N:
        ctx.fail(f"dst must be [{M}, {N}] (stationary free x moving free), got {list(dst.shape)}")
    fp32 = [dtypes.normalize(x.dtype) in (dtypes.float32, dtypes.tfloat32) for x in (stationary, moving)]
    if fp32[0] != fp32[1]:
        ctx.fail("if one matmul input is float32/tfloat32 the other must be too "
                 f"(stationary {stationary.storage.dtype_name}, moving {moving.storage.dtype_name})")
    okdst = (dtypes.float32, dtypes.bfloat16) if ctx.chip.has_bf16_psum else (dtypes.float32,)
    if dtypes.normalize(dst.dtype) not in okdst:
        ctx.fail(f"the PSUM output of a matmul must be {' or '.join(dtypes.name_of(d) for d in okdst)} "
                 f"on this target, got {dst.storage.dtype_name}")
    return K, M, N


# _mm_checks passed, by everything it reads (geometry, dtypes, memories of the three operands):
# a kernel repeats a few matmul geometries thousands of times. Bounded.
_CHECKED: dict = {}


def _checked(ctx, dst, stationary, moving, double):
    if not (isinstance(dst, NkiTensor) and isinstance(stationary, NkiTensor) and isinstance(moving, NkiTensor)):
        return _mm_checks(ctx, dst, stationary, moving, rows=2 if double else 1)
    key = (ctx.trace.target.name, double, dst.geometry(), stationary.geometry(), moving.geometry())
    hit = _CHECKED.get(key)
    if hit is None:
        hit = _mm_checks(ctx, dst, stationary, moving, rows=2 if double else 1)
        if len(_CHECKED) > 4096:
            _CHECKED.clear()
        _CHECKED[key] = hit
    return hit


def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=matmul_perf_mode.none, name=None):
    ctx = _Ctx("nc_matmul")
    double = perf_mode is not matmul_perf_mode.none and (
        perf_mode is matmul_perf_mode.double_row or getattr(perf_mode, "value", perf_mode) == "double_row")
    if double and not ctx.chip.has_fp8_double_row:
        ctx.fail("perf_mode=double_row needs NeuronCore-v3 or newer")
    K, M, N = _checked(ctx, dst, stationary, moving, double)
    tr = ctx.trace
    if not tr.numerics and not double:
        # timing only (a kernel's bulk: spelled out): no values, and the accumulate flag from the
        # written state alone (the masks below are what it reduces to when the destination is
        # untouched or whole)
        tr.check_initialized(stationary, "nisa.nc_matmul", "stationary", ctx.loc)
        tr.check_initialized(moving, "nisa.nc_matmul", "moving", ctx.loc)
        if accumulate is not None:
            acc = bool(accumulate) and M * N > 0
            if accumulate:
                tr.check_initialized(dst, "nisa.nc_matmul", "dst (accumulate=True)", ctx.loc)
        elif dst.nothing_written():
            acc = False
        elif dst.fully_written():
            acc = M * N > 0
        else:
            acc = bool(np.asarray(dst.written_mask()).any())
        dst.mark_written()
        tr.record("nc_matmul", "tensor", (stationary, moving), (dst,),
                  {"dst": dst, "stationary": stationary, "moving": moving, "accumulate": acc,
                   "perf_mode": None, "is_transpose": bool(is_transpose)}, ctx.loc)
        return
    s = ctx.read(stationary, "stationary")
    m = ctx.read(moving, "moving")
    if double and ctx.numerics:      # [K, 2, X] -> [2K, X]: both rows are contracted
        s = np.concatenate([s.reshape(K, 2, M)[:, 0], s.reshape(K, 2, M)[:, 1]])
        m = np.concatenate([m.reshape(K, 2, N)[:, 0], m.reshape(K, 2, N)[:, 1]])
    if dst.nothing_written():
        mask = np.zeros((M, N), bool)
    elif dst.fully_written():
        mask = np.ones((M, N), bool)
    else:
        mask = np.array(dst.written_mask()).reshape(M, N)
    if accumulate is None:
        acc = mask                       # first write to a PSUM location overwrites [ISA]
    else:
        acc = np.full((M, N), bool(accumulate))
        if accumulate:
            ctx.trace.check_initialized(dst, "nisa.nc_matmul", "dst (accumulate=True)", ctx.loc)
    vals = None
    if ctx.numerics:
        prod = core_matmul.reference(s, m)      # the core's semantics: FP32 accumulation
        old = np.asarray(dst.np(), dtype=np.float32).reshape(M, N)
        vals = np.where(acc, old + prod, prod)
    ctx.write(dst, vals)
    ctx.emit("tensor", [stationary, moving], [dst], dst=dst, stationary=stationary, moving=moving,
             accumulate=bool(acc.any()), perf_mode="double_row" if double else None,
             is_transpose=bool(is_transpose))
