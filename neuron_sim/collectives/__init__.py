"""Collective timing on Trainium fabrics, torch-free: algorithm (ring, mesh, recursive
halving/doubling) x topology of the simulated instance x link bandwidth and latency from the data
sheet. `estimate(op, nbytes, cores, fabric_for(instance))` answers one collective; `scale`
projects a measured training step to more ranks. See README.md."""

from .algorithms import ALGORITHMS, AUTO, OPS, Estimate, estimate
from .fabric import Fabric, fabric_for
from .links import ASSUMPTIONS

__all__ = ["ALGORITHMS", "ASSUMPTIONS", "AUTO", "Estimate", "Fabric", "OPS", "estimate",
           "fabric_for"]
