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


# ---- x4-packed MX words -----------------------------------------------------------------------
# One x4 element is one word holding four values along the contraction: FP8 x4 a 32-bit word of
# four bytes, FP4 x4 a 16-bit word of four nibbles, value j in byte (nibble) j from the least
# significant [ISA] quantize_mx; [SDK@81ce03ae26 `nki/deep-dives/mxfp-matmul.rst`].
X4_ELEMENT = {"float8_e4m3fn_x4": "float8_e4m3fn", "float8_e5m2_x4": "float8_e5m2",
              "float4_e2m1fn_x4": "float4_e2m1fn"}
_WORD = {4: np.dtype("<u4"), 2: np.dtype("<u2")}


def x4_word(dtype) -> np.dtype:
    """The unsigned word that holds one element of an x4 type (uint32 or uint16)."""
    return _WORD[int(itemsize(dtype))]


def unpack_x4(words, dtype) -> np.ndarray:
    """Words of x4 type `dtype` -> their four values as FP32, shape words.shape + (4,)."""
    w = np.ascontiguousarray(words).view(x4_word(dtype))
    elem = np_dtype(X4_ELEMENT[normalize(dtype)])
    if w.itemsize == 4:
        codes = w.view(np.uint8).reshape(w.shape + (4,))
    else:
        codes = ((w[..., None] >> np.array([0, 4, 8, 12], np.uint16)) & 0xF).astype(np.uint8)
    return codes.view(elem).astype(np.float32)


def pack_x4(values, dtype) -> np.ndarray:
    """Values [..., 4] (rounded to the element type) -> words of x4 type `dtype`."""
    name = normalize(dtype)
    codes = np.asarray(values, np.float32).astype(np_dtype(X4_ELEMENT[name])).view(np.uint8)
    word = x4_word(name)
    if word.itemsize == 4:
        return np.ascontiguousarray(codes).view(word)[..., 0]
    shifts = np.array([0, 4, 8, 12], np.uint16)
    return ((codes.astype(np.uint16) & 0xF) << shifts).sum(axis=-1, dtype=np.uint16)
