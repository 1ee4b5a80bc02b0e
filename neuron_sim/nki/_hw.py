"""Adapter from the simulator's hardware data (``neuron_sim.hardware``) to the limits the NKI
front end checks. No hardware number is written here: the NKI API limits the chip data does not
carry (bn_stats free size, per-operand free sizes) are the instruction modules' [ArchV2] [ISA]."""

from __future__ import annotations

from ..hardware import get_chip
from ..isa.common import PSUM_FREE_LIMIT, SBUF_FREE_LIMIT
from ..isa.vector.bn_stats import MAX_FREE as BN_STATS_FMAX
from .target import NkiTarget


def nki_target(name: str) -> NkiTarget:
    c = get_chip(name)
    return NkiTarget(
        name=c.name,
        nc_version=c.neuroncore_version,
        num_partitions=c.sbuf_partitions,
        sbuf_bytes_per_partition=c.sbuf_usable_bytes_per_partition,
        psum_bytes_per_partition=c.psum_bytes_per_partition,
        psum_bank_bytes=c.psum_bank_bytes_per_partition,
        gemm_stationary_fmax=c.matmul_stationary_fmax,
        gemm_moving_fmax=c.matmul_moving_fmax_fp32_out,
        gemm_moving_fmax_bf16=c.matmul_moving_fmax_bf16_out,
        bn_stats_fmax=BN_STATS_FMAX,
        sbuf_free_elems_max=SBUF_FREE_LIMIT,
        psum_free_elems_max=PSUM_FREE_LIMIT,
    )
