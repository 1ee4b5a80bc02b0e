"""Collective timing on Trainium fabrics, torch-free: the runtime's algorithm (mesh, recursive
halving/doubling, KangaRing, ring; hierarchical across instances) chosen by size and topology x
the fabric of the simulated instance(s) (NeuronLink torus, EFA) x bandwidth and latency from
hardware data. `estimate(op, nbytes, cores, fabric_for(instance))` answers one collective; `scale`
projects a measured training step to more ranks. See README.md."""

from .algorithms import ALGORITHMS, AUTO, OPS, Estimate, choose, estimate
from .fabric import Fabric, fabric_for
from .links import ASSUMPTIONS
from .scale import (CollectiveCall, StepEstimate, ddp_pattern, estimate_step, fsdp2_pattern,
                    pattern_from_log)

__all__ = ["ALGORITHMS", "ASSUMPTIONS", "AUTO", "CollectiveCall", "Estimate", "Fabric", "OPS",
           "StepEstimate", "choose", "ddp_pattern", "estimate", "estimate_step", "fabric_for",
           "fsdp2_pattern", "pattern_from_log"]
