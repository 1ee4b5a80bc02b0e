"""Numbers of the eager runtime (not of the hardware) the lowering needs, each with its reasoning.
Hardware numbers live in neuron_sim/hardware; these describe TorchNeuron's eager execution."""

from __future__ import annotations

# Launch cost of one eager program (one op, or one AEE-fused group). TorchNeuron runs each eager
# op as a cached NEFF; the runtime release notes say Trn3 cut NEFF start overhead "by 20 us"
# [torchneuron-api §2.7, runtime.rst], so a Trn2 start costs more than that: Trn2 25 us, Trn3 5 us,
# Trn1 as Trn2. Charged once per program, so AEE fusion of n ops saves (n - 1) launches.
EAGER_LAUNCH_S = {"trn1": 25e-6, "trn2": 25e-6, "trn3": 5e-6}

# Adaptive Eager Execution: the most ops fused into one program. TorchNeuron's concatenation engine
# bounds its buffer (TORCH_NEURONX_CONCATENATION_BUFFER_SIZE_LIMIT; value not public); 32 ops keeps
# fused programs small enough to build in milliseconds and cache (groups recur every step).
AEE_MAX_OPS = 32

# SBUF bytes per partition an AEE/compiled program may keep intermediates resident in, leaving
# the rest for the tiles each op streams through (usable SBUF on Trn2 is ~208 KiB/partition).
RESIDENT_SBUF_BYTES = 96 * 1024

# Host <-> device copies cross PCIe; a Gen5 x16 link moves ~50 GB/s in practice (assumed, as the
# device backend's first roofline did).
PCIE_BYTES_PER_S = 50e9

# Representative repeats (see README): at most this many identical blocks are built per op;
# bigger ops are built with REPEAT_CAP // 2 and REPEAT_CAP blocks and extrapolated.
REPEAT_CAP = 16
