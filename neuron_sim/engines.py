"""The instruction streams of one NeuronCore, numbered as the timing kernels see them.

Five sequencers (TensorE, VectorE, ScalarE, GpSimd, Sync) [ArchV2] plus the DMA pseudo-engine,
whose instructions run on 16 queues x 16 DMA engines [DMAov]."""

from __future__ import annotations

import enum


class Engine(enum.IntEnum):
    TENSOR = 0
    VECTOR = 1
    SCALAR = 2
    GPSIMD = 3
    SYNC = 4
    DMA = 5


ENGINE_NAMES = {Engine.TENSOR: "TensorE", Engine.VECTOR: "VectorE", Engine.SCALAR: "ScalarE",
                Engine.GPSIMD: "GpSimd", Engine.SYNC: "SyncE", Engine.DMA: "DMA"}

N_COMPUTE_STREAMS = 5  # streams 0..4 are the sequencers; 5 + q is DMA queue q


class Kind(enum.IntEnum):
    """What the timing kernel must treat specially."""
    GENERIC = 0
    LOAD_STATIONARY = 1  # TensorE background weight load
    MULTIPLY_MOVING = 2  # TensorE array pass (throttled, counts for HFU)
    DMA = 3


class Dge(enum.IntEnum):
    """DMA descriptor generation modes [DGE]."""
    NONE = 0   # static descriptors prebuilt in HBM
    SW = 1     # GpSimd software DGE
    HW = 2     # hardware DGE (NC-v3+)


class DmaDir(enum.IntEnum):
    HBM_TO_SBUF = 0
    SBUF_TO_HBM = 1
    SBUF_TO_SBUF = 2
    HBM_TO_HBM = 3


DMA_DIR_NAMES = {d: d.name.lower().replace("_to_", "->") for d in DmaDir}     # "hbm->sbuf"


def stream_name(stream: int) -> str:
    if stream < N_COMPUTE_STREAMS:
        return ENGINE_NAMES[Engine(stream)]
    return f"DMA queue {stream - N_COMPUTE_STREAMS}"
