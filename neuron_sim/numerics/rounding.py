"""Rounding FP32 values into storage formats, as the hardware does [Round][DTypes][ArchV4].

- RNE (round to nearest, ties to even): the default; ml_dtypes' casts are the reference.
- Stochastic rounding: round up with probability equal to the distance from the lower neighbour
  over the gap between the neighbours (unbiased in expectation), for any float storage type.
- MX quantization (NC-v4 `quantize_mx`, OCP MX v1.0): blocks of 32 values share an E8M0 scale
  2^(floor(log2(amax)) - emax_elem); elements are the values divided by the scale, saturated to
  the format's largest normal and cast RNE.
Denormals: FP32 keeps IEEE subnormals; narrow casts follow ml_dtypes (which keeps the format's
subnormals). Whether hardware flushes them is undocumented (data sheet §5)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .formats import np_dtype, normalize


def round_rne(x, dtype) -> np.ndarray:
    """Cast FP32 values to `dtype` with round-to-nearest-even (returns the storage array)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np_dtype(dtype))


def _neighbours(x32, dt):
    """Largest representable <= x and smallest >= x (as FP32)."""
    r = x32.astype(dt)
    rf = r.astype(np.float32)
    bits = r.view(f"u{dt.itemsize}")
    step_up = np.where(np.signbit(rf), bits - 1, bits + 1).astype(bits.dtype)
    step_dn = np.where(np.signbit(rf), bits + 1, bits - 1).astype(bits.dtype)
    # zero: step toward the sign of x
    zero = rf == 0
    up = step_up.view(dt).astype(np.float32)
    dn = step_dn.view(dt).astype(np.float32)
    tiny = np.float32(ml_dtypes.finfo(dt).smallest_subnormal)
    up = np.where(zero, tiny, up)
    dn = np.where(zero, -tiny, dn)
    lo = np.where(rf <= x32, rf, dn)
    hi = np.where(rf >= x32, rf, up)
    return lo, hi


def round_stochastic(x, dtype, rng: np.random.Generator) -> np.ndarray:
    """Cast FP32 values to `dtype` with stochastic rounding (exactly representable values, NaN
    and infinities are unchanged)."""
    x32 = np.asarray(x, np.float32)
    dt = np_dtype(dtype)
    if dt == np.float32:
        return x32.copy()
    lo, hi = _neighbours(x32, dt)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        gap = hi.astype(np.float64) - lo
        p_up = np.where(gap > 0, (x32.astype(np.float64) - lo) / gap, 0.0)
    take_hi = rng.random(x32.shape) < p_up
    out = np.where(take_hi, hi, lo)
    special = ~np.isfinite(x32) | ~np.isfinite(lo) | ~np.isfinite(hi)
    out = np.where(special, x32, out)
    return out.astype(dt)


def cast(x, dtype, rounding: str = "rne", rng: np.random.Generator | None = None) -> np.ndarray:
    """FP32 -> storage type with 'rne' or 'stochastic' rounding."""
    name = normalize(dtype)
    if rounding == "rne":
        return round_rne(x, name)
    if rounding in ("stochastic", "sr"):
        return round_stochastic(x, name, rng if rng is not None else np.random.default_rng(0))
    raise ValueError(f"rounding must be 'rne' or 'stochastic', got {rounding!r}")


def store(view: np.ndarray, values, dtype: str, rounding: str = "rne",
          rng: np.random.Generator | None = None) -> None:
    """Write an instruction's result into `view`, the array of a tensor of storage format
    `dtype`: the one store rule of the interpreter and the NKI trace. Float values round to the
    format: to the nearest integer of an integer format (NaN to 0, saturating at its range), to a
    float format as `rounding` says; other values (raw storage words, integers) are stored as
    they are. TF32 is stored as FP32 rounded to its 10 mantissa bits."""
    v = np.asarray(values).reshape(view.shape)
    if v.dtype.kind == "f":
        if dtype == "tfloat32":
            v = round_tf32(v)
        kind = view.dtype.kind
        if kind in "iub":
            v = np.nan_to_num(np.rint(v))
            if kind != "b":
                info = np.iinfo(view.dtype)
                v = np.clip(v, info.min, info.max)
        elif rounding != "rne":
            v = cast(v, dtype, rounding, rng)
    view[...] = v.astype(view.dtype, copy=False)    # RNE; out of a format's range: inf


def round_tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to tfloat32 (10 mantissa bits), ties to even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    lsb = (bits >> 13) & 1
    rounded = (bits + 0x0FFF + lsb) & np.uint32(0xFFFFE000)
    finite = np.isfinite(x)
    return np.where(finite, rounded.view(np.float32), x).astype(np.float32)


_EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float4_e2m1fn": 2}


def quantize_mx(x, elem_dtype: str = "float8_e4m3fn", block: int = 32, scale_headroom: int = 0):
    """OCP MX quantization along the last axis: returns (elements [..., n] in elem_dtype,
    scales [..., n/block] as E8M0 biased exponents uint8). `scale_headroom` doubles the scale that
    many times over the OCP sample conversion (NC-v4's quantize_mx takes 1)."""
    x32 = np.asarray(x, np.float32)
    shp = x32.shape
    blocks = x32.reshape(shp[:-1] + (shp[-1] // block, block))
    amax = np.max(np.abs(blocks), axis=-1)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)), -127.0) - _EMAX[elem_dtype] \
            + scale_headroom
    e = np.clip(e, -127, 127)
    scale = np.exp2(e).astype(np.float32)
    top = float(ml_dtypes.finfo(np_dtype(elem_dtype)).max)
    # values in [2^emax, 2^(emax+1)) can exceed the format's largest normal: saturate (OCP MX)
    scaled = np.clip(blocks / scale[..., None], -top, top)
    elems = scaled.astype(np_dtype(elem_dtype)).reshape(shp)
    return elems, (e + 127).astype(np.uint8)


def dequantize_mx(elems, scales, block: int = 32) -> np.ndarray:
    v = np.asarray(elems).astype(np.float32)
    s = np.exp2(scales.astype(np.float32) - 127.0)
    return (v.reshape(v.shape[:-1] + (-1, block)) * s[..., None]).reshape(v.shape)
