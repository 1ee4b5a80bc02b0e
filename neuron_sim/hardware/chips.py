"""Trainium chips as data: trainium-hw.json (copied from the shared data sheet, every entry with its
source) loaded into one frozen dataclass per chip. Field names carry their units. Capabilities are
derived from what the data lists (a chip has MX matmul because the data gives it an MX rate), so
code asks `chip.has_mx_matmul`, never for a generation name."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from types import MappingProxyType

from ..errors import UnknownHardwareError
from . import assumptions as _a
from .assumptions import CHIP_NAMES

# The product name of each generation (what libraries log and match on, as a GPU's name).
PRODUCT_NAMES = {"trn1": "Trainium1", "trn2": "Trainium2", "trn3": "Trainium3"}
# Chips the simulator has no data sheet for whose NeuronCores are one of ours: their NeuronCore
# version (Inferentia2 has NeuronCore-v2 cores, as Trainium1) [SimDoc].
SAME_CORE_CHIPS = {"inf2": 2}


@dataclass(frozen=True)
class Chip:
    name: str
    product_name: str
    neuroncore_version: int
    cores_per_chip: int
    lnc_supported: tuple
    lnc_default: int
    # HBM
    hbm_bytes: int
    hbm_stacks: int
    hbm_bytes_per_s: float
    hbm_bytes_per_s_per_core: float          # assumption (see assumptions.json)
    # engine clocks
    tensor_clock_hz: float
    vector_clock_hz: float
    scalar_clock_hz: float
    gpsimd_clock_hz: float
    # TensorE
    pe_rows: int
    pe_cols: int
    matmul_partition_max: int
    matmul_stationary_fmax: int
    matmul_moving_fmax_fp32_out: int
    matmul_moving_fmax_bf16_out: int
    pe_row_tile_sizes: tuple                 # rows of a PE-array row tile (tile_size) [ISA]
    # on-chip memories
    sbuf_partitions: int
    sbuf_bytes_per_partition: int
    sbuf_usable_bytes_per_partition: int
    psum_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes_per_partition: int
    # DMA
    dma_engines_per_core: int
    dma_queues_per_engine: int
    dma_engine_bytes_per_s: float            # sustained ("BW / Engine") [DMAbw]
    dma_descriptor_overhead_s: float         # assumption
    dma_fixed_latency_s: float               # assumption
    dma_static_issue_s: float                # assumption
    reuse_loop_invariant: bool               # assumption: the compiler hoists invariant code
    hwdge_units_per_core: int
    hwdge_instr_s: float
    swdge_instr_s: float                     # assumption
    dma_transpose_hbm2sbuf_efficiency: float
    dma_transpose_sbuf2sbuf_efficiency: float
    # throttling
    tensor_didt_initial_util: float          # 1.0 = no throttle
    tensor_didt_ramp_s: float
    tensor_didt_reset_idle_s: float
    # sequencing / cost-model constants
    min_ii_cycles: int
    dependent_latency_cycles: int
    tensor_access_latency_cycles: int
    tensor_mm_latency_extra_cycles: int
    mm_init_latency_cycles: int
    gemm_panel_budget_bytes_per_partition: int   # assumption: the lowering's SBUF for a B panel
    gemm_a_block_bytes_per_partition: int        # assumption: the lowering's A tiles of a block
    gemm_whole_k_bytes_per_partition: int        # assumption: whole-K operand tiles, else K blocks
    row_op_small_tiles_bytes_per_partition: int  # assumption: a norm's small tiles
    sbuf_alloc_align_bytes: int              # assumption: the NKI memory plan's tile alignment
    stream_sbuf_bytes_per_partition: int     # assumption: a streaming op's tiles in flight
    resident_reserve_bytes_per_partition: int  # assumption: kept free beside resident tensors
    resident_sbuf_bytes_per_partition: int   # assumption: a fused program's resident tensors
    stream_chunk_min_bytes_per_partition: int  # assumption: a streamed DMA's chunk, at least
    stream_chunk_max_bytes_per_partition: int  # assumption: ... and at most
    gemm_k_chunk_bytes_per_partition: int        # assumption: a batched matmul's K chunks
    gemm_output_coalesce_bytes_per_partition: int  # assumption: outputs stored by one DMA
    attention_head_sbuf_bytes_per_partition: int   # assumption: flash attention's per-head state
    copy_piece_bytes: int                    # assumption: one DMA of a lowered HBM->HBM copy
    copy_split_min_bytes: int                # assumption: smaller copies stay on one core
    gather_rows_bytes_per_partition: int     # assumption: a gather block's rows per partition
    row_whole_max_elems: int                 # assumption: longer rows run in pieces
    row_piece_elems: int                     # assumption: a row tile (pieces of a long row)
    fast_load_stationary_speedup: int
    fp32_matmul_cost_multiplier: int
    gpsimd_start_cycles: int
    cross_engine_semaphore_latency_s: float
    core_pair_semaphore_latency_s: float     # assumption: one core's signal to its LNC=2 pair
    eager_launch_s: float                    # assumption: start of one eager program (NEFF)
    host_link_bytes_per_s: float             # assumption: host <-> device copies over PCIe
    vector_exp_speedup_vs_scalar: int
    # instruction limits [ArchV2][ISA]: free elements per partition of an operand
    sbuf_free_elems_max: int                 # VectorE/ScalarE/GpSimd operand in SBUF
    psum_free_elems_max: int                 # VectorE/ScalarE operand in PSUM
    bn_stats_free_elems_max: int             # nl.tile_size.bn_stats_fmax
    max8_free_elems_min: int
    max8_free_elems_max: int
    sendrecv_gpsimd_dma_bytes_per_partition_max: int     # sendrecv on the GpSimd DMA path
    sbuf_stride_penalty_threshold_bytes: int  # innermost stride above it halves the bandwidth
    vector_transpose_block_max: int          # VectorE nc_transpose: P and F at most this
    partition_quadrant_size: int             # partitions per lane quadrant: start rules, MX scales
    mx_group_partitions: int                 # partitions of an MX scale group (0: no MX)
    ap_free_dims_max: int                    # free dimensions of an engine access pattern
    act_read_accumulator_cycles: int         # ScalarE reading out its accumulator
    gpsimd_cores: int
    # capabilities (derived from which data exist)
    has_fp8_double_row: bool
    has_mx_matmul: bool
    has_bf16_psum: bool
    has_vector_exponential: bool
    has_vector_perf_modes: bool              # NC-v3 2x/4x BF16 modes
    has_scalar_tensor_scalar: bool           # NC-v4 ScalarE runs tensor_scalar/tensor_copy
    has_hwdge: bool
    has_tensor_didt_throttle: bool
    has_tensor_transpose_mode: bool          # is_transpose=True bit-exact mode (NC-v3+)
    has_scalar_v3_ops: bool                  # NC-v3+ ScalarE: tensor_copy, immediate bias, reduces
    sources: MappingProxyType = field(repr=False, compare=False, default=None)

    # ---- derived quantities -------------------------------------------------------------
    @property
    def has_lnc2(self) -> bool:
        """Two physical cores can run as one logical core (LNC=2), with core_barrier [ISA]."""
        return 2 in self.lnc_supported

    @property
    def psum_bank_fp32_elems(self) -> int:
        """FP32 elements one PSUM bank holds per partition (512 on every generation): the
        moving tile a matmul accumulates into without crossing banks [Tile]."""
        return self.psum_bank_bytes_per_partition // 4

    @property
    def matmul_spans_psum_banks(self) -> bool:
        """A matmul's moving free size may exceed one PSUM bank of FP32 (NC-v4: 4096 against
        512), its accumulation group then spanning consecutive banks from a bank boundary [ISA]."""
        return self.matmul_moving_fmax_fp32_out > self.psum_bank_fp32_elems

    @property
    def gpsimd_partitions_per_core(self) -> int:
        """Partitions one GpSimd core serves (16: 128 partitions over 8 cores) [ArchV2]."""
        return self.sbuf_partitions // self.gpsimd_cores

    @property
    def hbm_stack_bytes_per_s(self) -> float:
        """One HBM stack's bandwidth: the profiler's MBU denominator (~716 GB/s on Trn2, implied
        by the kernel-optimisation tutorial's MBU figures [KOpt], = 2.9 TB/s / 4 stacks)."""
        return self.hbm_bytes_per_s / self.hbm_stacks

    def tensor_peak_flops(self, dtype: str = "bfloat16") -> float:
        """Peak TensorE FLOP/s of one physical core, derived from clock x rows x cols x 2 (the
        profiler's HFU/MFU denominator [Explorer]); FP32 is 1/4, FP8 double_row 2x, MX 4x."""
        base = self.pe_rows * self.pe_cols * 2 * self.tensor_clock_hz
        dt = str(dtype)
        if dt in ("float32", "fp32"):
            return base / self.fp32_matmul_cost_multiplier
        if dt.startswith(("mxfp", "float4")) or dt.endswith("_x4"):
            return base * 4 if self.has_mx_matmul else base
        if dt.startswith(("float8", "fp8")):
            return base * 2 if self.has_fp8_double_row else base
        return base

    def matmul_moving_fmax(self, out_dtype: str = "float32") -> int:
        return (self.matmul_moving_fmax_bf16_out if out_dtype == "bfloat16"
                else self.matmul_moving_fmax_fp32_out)

    def clock_hz(self, engine: int) -> float:
        from ..engines import Engine
        return {Engine.TENSOR: self.tensor_clock_hz, Engine.VECTOR: self.vector_clock_hz,
                Engine.SCALAR: self.scalar_clock_hz, Engine.GPSIMD: self.gpsimd_clock_hz,
                Engine.SYNC: self.scalar_clock_hz}[engine]

    def source(self, field_name: str) -> str:
        """Where the value of field `field_name` comes from: its data entry's source, an
        assumption's reasoning, or the data it is derived from."""
        if field_name in self.sources:
            return self.sources[field_name]
        if field_name in _a.ASSUMPTIONS:
            return f"assumption (neuron_sim/hardware/assumptions.json): " \
                   f"{_a.ASSUMPTIONS[field_name].reasoning}"
        if field_name in self.__dataclass_fields__:
            return ("derived from the data sheet by neuron_sim/hardware/chips.py (_load), or a "
                    "default where the data give nothing for this chip")
        raise KeyError(f"Chip has no field {field_name!r}")


@lru_cache(maxsize=1)
def _data() -> dict:
    with resources.files(__package__).joinpath("trainium-hw.json").open("r") as f:
        return json.load(f)


# Fields read under their own name: from the chip's data sheet, its cost-model section, and
# assumptions.json (every assumption named like a field); the loader spells out the rest.
_SHEET = ("neuroncore_version", "hbm_stacks", "tensor_clock_hz", "vector_clock_hz",
          "scalar_clock_hz", "gpsimd_clock_hz", "pe_rows", "pe_cols", "matmul_partition_max",
          "matmul_stationary_fmax", "sbuf_partitions", "sbuf_bytes_per_partition",
          "sbuf_usable_bytes_per_partition", "psum_bytes_per_partition", "psum_banks",
          "psum_bank_bytes_per_partition", "dma_engines_per_core", "dma_queues_per_engine",
          "gpsimd_cores")
_COST_MODEL = ("min_ii_cycles", "fp32_matmul_cost_multiplier", "gpsimd_start_cycles",
               "sbuf_free_elems_max", "psum_free_elems_max", "bn_stats_free_elems_max",
               "max8_free_elems_min", "max8_free_elems_max", "sbuf_stride_penalty_threshold_bytes",
               "vector_transpose_block_max", "act_read_accumulator_cycles",
               "partition_quadrant_size", "ap_free_dims_max",
               "sendrecv_gpsimd_dma_bytes_per_partition_max")


# Data entries that fill Chip fields of other names (their sources are kept under the fields)
_FIELDS_OF = {"neuron_cores_per_chip": ("cores_per_chip",),
              "hbm_bw_bytes_per_s": ("hbm_bytes_per_s",),
              "dma_engine_bw_sustained_bytes_per_s": ("dma_engine_bytes_per_s",),
              "hwdge_instr_time_s": ("hwdge_instr_s",),
              "matmul_moving_fmax": ("matmul_moving_fmax_fp32_out", "matmul_moving_fmax_bf16_out")}


@lru_cache(maxsize=None)
def _load(name: str) -> Chip:
    raw = _data()[name]
    cm = _data()["cost_model"]
    sources = {}

    def v(key, default=None, *, section=raw):
        entry = section.get(key)
        if entry is None:
            return default
        for f in _FIELDS_OF.get(key, (key,)):
            sources[f] = entry["source"]
        return entry["value"]

    def v_or_trn2(key):
        """The chip's entry, else Trn2's (measured on Trn2 only), its source saying so."""
        if key in raw:
            return v(key)
        value = v(key, section=_data()["trn2"])
        for f in _FIELDS_OF.get(key, (key,)):
            sources[f] = f"Trn2's value, taken for {name}: {sources[f]}"
        return value

    moving = v("matmul_moving_fmax")
    has_mx = v("tensor_mx_flops_per_core") is not None
    has_double_row = (v("tensor_fp8_flops_per_core") or v("tensor_fp8_double_row_flops_per_core")) \
        is not None
    didt = v("tensor_didt_initial_util")
    same = {f: v(f) for f in _SHEET} | {f: v(f, section=cm) for f in _COST_MODEL} | {
        f: _a.value(f, name) for f in _a.ASSUMPTIONS if f in Chip.__dataclass_fields__}
    for f in ("dma_transpose_hbm2sbuf_efficiency", "dma_transpose_sbuf2sbuf_efficiency"):
        same[f] = v_or_trn2(f)
    return Chip(
        **same,
        name=name,
        product_name=PRODUCT_NAMES[name],
        cores_per_chip=v("neuron_cores_per_chip"),
        lnc_supported=tuple(v("lnc_supported")),
        lnc_default=v("lnc_default", 1),
        pe_row_tile_sizes=tuple(v_or_trn2("pe_row_tile_sizes")),
        hbm_bytes=int(v("hbm_bytes")),
        hbm_bytes_per_s=v("hbm_bw_bytes_per_s"),
        matmul_moving_fmax_fp32_out=moving or v("matmul_moving_fmax_fp32_out"),
        matmul_moving_fmax_bf16_out=moving or v("matmul_moving_fmax_bf16_out"),
        dma_engine_bytes_per_s=v("dma_engine_bw_sustained_bytes_per_s"),
        hwdge_units_per_core=v("hwdge_units_per_core", 0),
        hwdge_instr_s=v_or_trn2("hwdge_instr_time_s"),
        tensor_didt_initial_util=didt if didt is not None else 1.0,
        tensor_didt_ramp_s=v("tensor_didt_ramp_s", 0.0),
        vector_exp_speedup_vs_scalar=v("vector_exp_speedup_vs_scalar", 0),
        mx_group_partitions=v("mx_group_partitions", 0),
        has_fp8_double_row=has_double_row,
        has_mx_matmul=has_mx,
        has_bf16_psum=has_mx and v("matmul_moving_fmax_bf16_out") is not None,
        has_vector_exponential=v("vector_exp_speedup_vs_scalar") is not None,
        has_vector_perf_modes=v("vector_elems_per_cycle_bf16") is not None
        or v("vector_elems_per_cycle_16b_8b") is not None,
        has_scalar_tensor_scalar=v("scalar_elems_per_cycle_16b_8b") is not None,
        has_hwdge=v("hwdge_units_per_core") is not None or name == "trn3",
        has_tensor_didt_throttle=didt is not None,
        has_tensor_transpose_mode=has_double_row,
        has_scalar_v3_ops=v("neuroncore_version") >= 3,
        sources=MappingProxyType(sources),
    )


# Notes on derived capabilities, kept next to the loader:
# - pe_row_tile_sizes: the data list them for Trn2 [ISA]; Trn3 allows the same row tiling (also for
#   MX matmul) [ISA] and takes Trn2's list; Trn1 (2x64 tiling only [ISAcost]) never reads it.
# - has_hwdge on trn3: [ArchV4] says DGE is "present (not counted)"; the json has no unit count.
# - has_bf16_psum: NC-v4 writes BF16 into PSUM [ArchV4]; the data give a BF16-output moving limit.
# - has_tensor_transpose_mode: is_transpose=True exists from NC-v3 [ArchV3], like double_row.
# - has_scalar_v3_ops: ScalarE of NC-v2 runs no tensor_copy (activation(op=copy) instead), takes no
#   immediate activation bias and reduces only with add [ISA] tensor_copy, activation.


def get_chip(name: "str | Chip | None" = None) -> Chip:
    """The chip `name` ('trn1', 'trn2', 'trn3'; case-insensitive), a Chip as it is, or with no
    name the setting NEURON_SIM_DEFAULT_CHIP's."""
    if isinstance(name, Chip):
        return name
    if not name:
        from ..config import get
        name = get("NEURON_SIM_DEFAULT_CHIP")
    key = str(name).lower()
    if key not in CHIP_NAMES:
        raise UnknownHardwareError("chip", name, list(CHIP_NAMES))
    return _load(key)


def list_chips() -> list[str]:
    return list(CHIP_NAMES)
