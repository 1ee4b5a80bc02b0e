"""Numbers of the eager runtime (not of the hardware) the lowering needs, each with its reasoning.
Hardware numbers live in neuron_sim/hardware (the launch cost of one eager program is the chip's
`eager_launch_s`, its resident SBUF `resident_sbuf_bytes_per_partition`, a host copy's PCIe rate
`host_link_bytes_per_s`); these describe TorchNeuron's eager execution."""

from __future__ import annotations

# Adaptive Eager Execution: the most ops fused into one program. TorchNeuron's concatenation engine
# bounds its buffer (TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT; value not public); 32 ops keeps
# fused programs small enough to build in milliseconds and cache (groups recur every step).
AEE_MAX_OPS = 32

# Representative repeats (see README): at most this many identical blocks are built per op;
# bigger ops are built with REPEAT_CAP // 2 and REPEAT_CAP blocks and extrapolated.
REPEAT_CAP = 16
