"""NKI data types as NumPy dtypes (ml_dtypes for the low-precision floats).

A tensor's *logical* dtype decides its size in memory and the legality rules; its *storage*
dtype is what the NumPy backing array holds. They are the same unless ``NKI_PRECISE_FP=0``, in
which case low-precision floats are stored as float32 (no rounding), as AWS's simulator does.
tfloat32 (1-8-10) has no NumPy type: it is stored as float32 and rounded to 10 mantissa bits.
The x4-packed MX types (nc_matmul_mx, quantize_mx) have none either: each element is stored as the
word that packs its four values (numerics/formats.py, pack_x4).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..numerics import formats as _formats


class _TFloat32:
    """Marker dtype for tfloat32: 4 bytes in memory, 10-bit mantissa."""

    name = "tfloat32"
    itemsize = 4
    kind = "f"

    def __repr__(self) -> str:
        return "tfloat32"

    def __eq__(self, other) -> bool:
        return isinstance(other, _TFloat32) or other == "tfloat32"

    def __hash__(self) -> int:
        return hash("tfloat32")


class _PackedX4:
    """Marker dtype of an x4-packed MX type: four FP8 (FP4) values in one 32 (16)-bit word."""

    kind = "V"

    def __init__(self, name: str):
        self.name, self.itemsize = name, int(_formats.itemsize(name))
        self.storage = _formats.x4_word(name)

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        return getattr(other, "name", other) == self.name

    def __hash__(self) -> int:
        return hash(self.name)


bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
tfloat32 = _TFloat32()
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)     # MX scales
float8_e4m3fn_x4 = _PackedX4("float8_e4m3fn_x4")
float8_e5m2_x4 = _PackedX4("float8_e5m2_x4")
float4_e2m1fn_x4 = _PackedX4("float4_e2m1fn_x4")

_BY_NAME = {
    "bool": bool_, "bool_": bool_, "int8": int8, "int16": int16, "int32": int32,
    "uint8": uint8, "uint16": uint16, "uint32": uint32, "float16": float16,
    "float32": float32, "bfloat16": bfloat16, "tfloat32": tfloat32,
    "float8_e4m3": float8_e4m3, "float8_e5m2": float8_e5m2, "float8_e4m3fn": float8_e4m3fn,
    "float8_e8m0fnu": float8_e8m0fnu, "float8_e4m3fn_x4": float8_e4m3fn_x4,
    "float8_e5m2_x4": float8_e5m2_x4, "float4_e2m1fn_x4": float4_e2m1fn_x4,
    # 64-bit host types arrive from NumPy/torch inputs; Trainium computes them in 32 bits.
    "float64": np.dtype(np.float64), "int64": np.dtype(np.int64),
}

LOW_PRECISION_FLOATS = (bfloat16, float16, float8_e4m3, float8_e5m2, float8_e4m3fn)


def normalize(dtype) -> np.dtype | _TFloat32:
    """Accept nl dtypes, NumPy dtypes/types, ml_dtypes types, strings and torch dtypes."""
    if isinstance(dtype, (_TFloat32, _PackedX4)):
        return dtype
    if isinstance(dtype, str):
        key = dtype.replace("torch.", "")
        return _BY_NAME[key] if key in _BY_NAME else np.dtype(key)
    if getattr(dtype, "is_floating_point", None) is not None:
        name = str(dtype).replace("torch.", "")     # a torch.dtype, matched by name so torch
        if name in _BY_NAME:                        # is never imported
            return _BY_NAME[name]
    return np.dtype(dtype)


def itemsize(dtype) -> int:
    return _info(dtype)[1]


def storage_dtype(dtype, precise: bool) -> np.dtype:
    """The NumPy dtype that holds values of ``dtype``."""
    dt = normalize(dtype)
    if isinstance(dt, _TFloat32):
        return float32
    if isinstance(dt, _PackedX4):
        return dt.storage
    if not precise and any(dt == lp for lp in LOW_PRECISION_FLOATS):
        return float32
    return dt


def name_of(dtype) -> str:
    return _info(dtype)[0]


_INFO: dict = {}        # dtype -> (name, itemsize): asked for every tensor a kernel makes


def _info(dtype) -> tuple[str, int]:
    info = _INFO.get(dtype)
    if info is None:
        dt = normalize(dtype)
        info = _INFO[dtype] = (dt.name, dt.itemsize)
    return info
