"""Which NeuronCore a kernel is traced for, and the NKI-visible limits of that core.

The target comes from, in order: ``@nki.jit(platform_target=...)``, the environment variable
``NEURON_PLATFORM_TARGET_OVERRIDE`` (``trn1``/``gen2``, ``trn2``/``gen3``, ``trn3``/``gen4``), and
otherwise ``trn3``, the default of AWS's simulator when no Neuron device is present [SimDoc].
The numbers themselves are read from the simulator's hardware data (``neuron_sim.hardware``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..hardware import CHIP_NAMES, get_chip
from .errors import NkiLaunchError

# NKI's spellings of a target: the chip's name, gen<N> for its NeuronCore-v<N> (the chip data's
# neuroncore_version), and inf2 (Inferentia2 has NeuronCore-v2 cores) [SimDoc].
ALIASES = {alias: name for name in CHIP_NAMES
           for alias in (name, f"gen{get_chip(name).neuroncore_version}")}
ALIASES["inf2"] = ALIASES["gen2"]
DEFAULT_TARGET = "trn3"


@dataclass(frozen=True)
class NkiTarget:
    """Limits the NKI front end checks against. Field names carry units."""

    name: str                         # trn1 / trn2 / trn3
    nc_version: int                   # 2, 3, 4 (NeuronCore-v2/v3/v4)
    num_partitions: int
    sbuf_bytes_per_partition: int     # usable by kernels (compiler view)
    psum_bytes_per_partition: int
    psum_bank_bytes: int
    gemm_stationary_fmax: int
    gemm_moving_fmax: int             # fp32 PSUM output
    gemm_moving_fmax_bf16: int        # bf16 PSUM output (NC-v4 only differs)
    bn_stats_fmax: int

    @property
    def psum_num_banks(self) -> int:
        return self.psum_bytes_per_partition // self.psum_bank_bytes


def resolve_name(platform_target: str | None = None) -> str:
    from . import settings
    raw = platform_target or settings.get("NEURON_PLATFORM_TARGET_OVERRIDE") or DEFAULT_TARGET
    key = str(raw).strip().lower()
    if key not in ALIASES:
        raise NkiLaunchError(
            f"unknown platform target {raw!r}: expected one of trn1/gen2, trn2/gen3, trn3/gen4 "
            "(set NEURON_PLATFORM_TARGET_OVERRIDE or @nki.jit(platform_target=...))")
    return ALIASES[key]


@lru_cache(maxsize=None)
def get_target(name: str) -> NkiTarget:
    """The NKI limits of a target, read from the chip data."""
    c = get_chip(resolve_name(name))
    return NkiTarget(
        name=c.name, nc_version=c.neuroncore_version, num_partitions=c.sbuf_partitions,
        sbuf_bytes_per_partition=c.sbuf_usable_bytes_per_partition,
        psum_bytes_per_partition=c.psum_bytes_per_partition,
        psum_bank_bytes=c.psum_bank_bytes_per_partition,
        gemm_stationary_fmax=c.matmul_stationary_fmax,
        gemm_moving_fmax=c.matmul_moving_fmax_fp32_out,
        gemm_moving_fmax_bf16=c.matmul_moving_fmax_bf16_out,
        bn_stats_fmax=c.bn_stats_free_elems_max)
