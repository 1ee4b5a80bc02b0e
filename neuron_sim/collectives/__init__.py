"""Collective timing on Trainium fabrics, torch-free: algorithm (ring, mesh, recursive
halving/doubling) x topology of the simulated instance x link bandwidth and latency from the data
sheet. `estimate(op, nbytes, cores, fabric_for(instance))` answers one collective; `scale`
projects a measured training step to more ranks. See README.md."""

from .algorithms import ALGORITHMS, AUTO, OPS, Estimate, estimate
from .fabric import Fabric, fabric_for
from .links import ASSUMPTIONS
from .scale import (CollectiveCall, StepEstimate, ddp_pattern, estimate_step, fsdp2_pattern,
                    pattern_from_log)

__all__ = ["ALGORITHMS", "ASSUMPTIONS", "AUTO", "CollectiveCall", "Estimate", "Fabric", "OPS",
           "StepEstimate", "ddp_pattern", "estimate", "estimate_step", "fabric_for", "fsdp2_pattern",
           "pattern_from_log"]
