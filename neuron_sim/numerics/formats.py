"""Data types of the NeuronCore and their NumPy (ml_dtypes) equivalents.

Names follow nki.language [Shared]. Arithmetic in every engine is FP32 [ArchV2]; these types are
storage formats. `cast` rounds FP32 values into a storage type exactly as the format does (RNE, the
hardware default, or stochastic rounding [Round])."""

from __future__ import annotations

import ml_dtypes
import numpy as np

# name -> (numpy storage dtype, bytes per element as stored)
DTYPES: dict[str, tuple[np.dtype, float]] = {
    "float32": (np.dtype(np.float32), 4),
    "tfloat32": (np.dtype(np.float32), 4),   # 1-8-10 in the PE; stored as FP32
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), 2),
    "float16": (np.dtype(np.float16), 2),
    "float8_e4m3": (np.dtype(ml_dtypes.float8_e4m3), 1),   # IEEE-like e4m3 (Trn2 'FP8_EXP4')
    "float8_e4m3fn": (np.dtype(ml_dtypes.float8_e4m3fn), 1),  # OCP e4m3fn (NC-v4)
    "float8_e5m2": (np.dtype(ml_dtypes.float8_e5m2), 1),
    "float8_e8m0fnu": (np.dtype(ml_dtypes.float8_e8m0fnu), 1),  # MX scales
    "float4_e2m1fn": (np.dtype(ml_dtypes.float4_e2m1fn), 0.5),
    # packed x4 MX element types: 4 values per element [Shared]
    "float8_e4m3fn_x4": (np.dtype(ml_dtypes.float8_e4m3fn), 4),
    "float8_e5m2_x4": (np.dtype(ml_dtypes.float8_e5m2), 4),
    "float4_e2m1fn_x4": (np.dtype(ml_dtypes.float4_e2m1fn), 2),
    "int8": (np.dtype(np.int8), 1), "uint8": (np.dtype(np.uint8), 1),
    "int16": (np.dtype(np.int16), 2), "uint16": (np.dtype(np.uint16), 2),
    "int32": (np.dtype(np.int32), 4), "uint32": (np.dtype(np.uint32), 4),
    "bool": (np.dtype(np.uint8), 1),
}

FLOAT32_FAMILY = ("float32", "tfloat32")
SIXTEEN_BIT_FLOATS = ("bfloat16", "float16")
FP8 = ("float8_e4m3", "float8_e4m3fn", "float8_e5m2")
MX_PACKED = ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4")


_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
            "float": "float32", "float8_e4m3b11fnuz": "float8_e4m3"}


def normalize(dtype) -> str:
    """Accept a dtype name, a NumPy/ml_dtypes dtype, or an object with `.name`."""
    if type(dtype) is str and dtype in DTYPES:    # canonical: asked for every operand
        return dtype
    name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None) or str(dtype)
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    return name


def itemsize(dtype) -> float:
    v = DTYPES.get(dtype) if type(dtype) is str else None
    return v[1] if v is not None else DTYPES[normalize(dtype)][1]


def np_dtype(dtype) -> np.dtype:
    return DTYPES[normalize(dtype)][0]
