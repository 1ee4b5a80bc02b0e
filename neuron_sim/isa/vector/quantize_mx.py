"""quantize_mx (NC-v4 VectorE): BF16/FP16 values -> MXFP8 data (x4-packed) plus E8M0 scales in
SBUF, in the layout nc_matmul_mx reads [ArchV4][ISA] quantize_mx.

Layout: src [P, 4F] -> dst [P, F] x4 (four consecutive values of a partition in one element);
one scale per group of 8 partitions x 4 values. The groups of each 32-partition quadrant write
4 consecutive scale partitions at the same offset of that quadrant (`scale_rows`), so dst_scale
has 4 partitions when src has one quadrant and as many partitions as src otherwise, starting in
the first 16 partitions of a quadrant (4-partition scales of several tiles share one) [ISA].
Numerics: the block scale is twice the OCP sample conversion's (headroom so the largest value of
a group rounds without saturating) [ISA] quantize_mx (SDK 2.32), then RNE to the element type.
Cost: 4 elements per partition per cycle [ArchV4] -> max(64, N/4) VectorE cycles (derived)."""

from __future__ import annotations

from math import ceil

import numpy as np

from ...engines import Engine
from ...errors import CapabilityError, DtypeError, FreeSizeError, PartitionError
from ...numerics.formats import X4_ELEMENT, np_dtype
from ...numerics.rounding import quantize_mx as _quantize
from ...program.ap import Memory
from ..common import Operand, access_latency, check_operands, make

NAME = "quantize_mx"
ENGINES = (Engine.VECTOR,)
OUT = ("float8_e4m3fn_x4", "float8_e5m2_x4")            # no FP4 output [ISA]
SRC = ("bfloat16", "float16")
SCALE = ("uint8", "float8_e8m0fnu")                     # E8M0 codes [ISA]
SCALE_HEADROOM = 1                                      # 2x the OCP scale [ISA]
# A group: chip.mx_group_partitions (8) partitions x 4 values [ArchV4]. Scales may start anywhere
# in the first two groups' partitions of a quadrant (16: the first or second 8), so the scales of
# several tiles share one [ISA]; the engines' start rule does not bind them (check_scale's does).
SCALES = Operand("write", (Memory.SBUF,), "MX scales live in SBUF", own_start=True)
OPERANDS = {"dst": Operand("write", (Memory.SBUF,), "quantize_mx works in SBUF"),
            "src": Operand("read", (Memory.SBUF,), "quantize_mx works in SBUF"),
            "dst_scale": SCALES}


def scale_rows(p: int, chip) -> np.ndarray:
    """Partition offsets, from the scale tile's first partition, of the scales of a p-partition
    MX data tile, group by group (group g covers data partitions n*g .. n*g + n-1)."""
    q, n = chip.partition_quadrant_size, chip.mx_group_partitions
    g = np.arange(p // n)
    return (g // (q // n)) * q + g % (q // n)


def check_data_partitions(instr, name, ap, chip) -> None:
    q, n = chip.partition_quadrant_size, chip.mx_group_partitions
    if ap.p_size % q or ap.p_size > chip.sbuf_partitions:
        raise PartitionError(instr, name, f"a multiple of {q} partitions, at most "
                             f"{chip.sbuf_partitions} (MX groups of {n} partitions, "
                             "scales per quadrant)", ap.p_size, chip.name,
                             f"pad the contraction to a multiple of {q} partitions")


def check_scale(instr, name, scale, data_p: int, free: int, chip) -> None:
    """The scales of a data tile of `data_p` partitions and `free` x4 elements per partition."""
    if scale.dtype not in SCALE:
        raise DtypeError(instr, name, f"E8M0 scales: one of {SCALE}", scale.dtype, chip.name)
    q, n = chip.partition_quadrant_size, chip.mx_group_partitions
    want = (q // n, q) if data_p <= q else (data_p,)
    if scale.p_size not in want:
        raise PartitionError(instr, name, f"{' or '.join(map(str, want))} partitions for data of "
                             f"{data_p} partitions ({q // n} scale partitions per {q}-partition "
                             "quadrant, kept in that quadrant)", scale.p_size, chip.name,
                             f"allocate the scale tile with {want[-1]} partitions")
    off, span = scale.p_start % q, 2 * n
    if off + q // n > span:
        raise PartitionError(instr, name, f"a start in the first {span} partitions of an "
                             f"SBUF quadrant (offset <= {span - q // n})",
                             f"start partition {scale.p_start} (offset {off})", chip.name)
    if scale.free_size != free:
        raise FreeSizeError(instr, name, f"{free} scales per partition (one per x4 element of "
                            "the data)", scale.free_size, chip.name)


def build(chip, dst, src, dst_scale):
    if not chip.has_mx_matmul:
        raise CapabilityError(NAME, "dst", "NeuronCore-v4 or newer (Trn3): quantize_mx is "
                              "available only there", f"NeuronCore-v{chip.neuroncore_version}",
                              chip.name, "cast to FP8 with tensor_copy, or target trn3")
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, src=src, dst_scale=dst_scale)
    if src.dtype not in SRC:
        raise DtypeError(NAME, "src", f"one of {SRC}", src.dtype, chip.name,
                         "copy the values to a bfloat16 tile first")
    if dst.dtype not in OUT:
        raise DtypeError(NAME, "dst", f"one of {OUT}", dst.dtype, chip.name)
    check_data_partitions(NAME, "src", src, chip)
    if src.free_size % 4:
        raise FreeSizeError(NAME, "src", "a multiple of 4 elements per partition (4 values per "
                            "x4 element)", src.free_size, chip.name)
    if dst.p_size != src.p_size or 4 * dst.free_size != src.free_size:
        raise PartitionError(NAME, "dst", f"[{src.p_size}, {src.free_size // 4}] x4 elements for "
                             f"src [{src.p_size}, {src.free_size}]",
                             [dst.p_size, dst.free_size], chip.name)
    check_scale(NAME, "dst_scale", dst_scale, src.p_size, dst.free_size, chip)
    q = chip.partition_quadrant_size
    if dst.p_start // q != dst_scale.p_start // q:
        raise PartitionError(NAME, "dst_scale", f"the SBUF quadrant of dst (partition "
                             f"{dst.p_start})", f"start partition {dst_scale.p_start}", chip.name)
    n = src.free_size
    return make(NAME, Engine.VECTOR, max(chip.min_ii_cycles, ceil(n / 4)),
                access_latency(chip, 3), (src,), (dst, dst_scale),
                {"scale_rows": tuple(int(r) for r in scale_rows(src.p_size, chip))})


def reference(x, elem_dtype, g):
    """x [P, F, 4] -> (elements [P, F, 4] as FP32, scale codes [P/g, F]) per group of g
    partitions x 4 values."""
    p, f, _ = x.shape
    blocks = x.reshape(p // g, g, f, 4).transpose(0, 2, 1, 3).reshape(p // g, f, g * 4)
    elems, scales = _quantize(blocks, elem_dtype, g * 4, SCALE_HEADROOM)
    elems = elems.astype(np.float32).reshape(p // g, f, g, 4).transpose(0, 2, 1, 3)
    return elems.reshape(p, f, 4), scales.reshape(p // g, f)


def semantics(state, emit):
    (src,) = emit.reads
    dst, scale = emit.writes
    group = src.p_size // len(emit.params["scale_rows"])     # one scale row per group
    elems, codes = reference(state.read(src).reshape(src.p_size, -1, 4), X4_ELEMENT[dst.dtype],
                             group)
    state.write_packed(dst, elems)
    # the E8M0 codes the scale tile holds, [partitions, free] uint8: partitions no scale is
    # written to keep their contents, as on the hardware
    v = state.read(scale).reshape(scale.p_size, -1)
    raw = v.astype(np.uint8) if scale.dtype == "uint8" else \
        v.astype(np_dtype(scale.dtype)).view(np.uint8)
    raw[list(emit.params["scale_rows"])] = codes
    state.write_raw(scale, raw.view(np_dtype(scale.dtype)))
