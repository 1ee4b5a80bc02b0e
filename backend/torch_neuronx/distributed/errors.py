"""Typed errors of backend="neuron". Each says which rank, which tensor, what was expected, what
was found and what to do."""

from __future__ import annotations


class NeuronDistributedError(RuntimeError):
    """Base class of the errors raised by the neuron process group."""


class DistributedSetupError(NeuronDistributedError):
    """init_process_group cannot give each rank its NeuronCore (device used too early,
    mismatched world sizes, more local ranks than cores, a rank that never joined)."""


class CollectiveDeviceError(NeuronDistributedError, ValueError):
    """A collective got a tensor that is not on this rank's neuron device."""


class CollectiveMismatchError(NeuronDistributedError, ValueError):
    """Ranks called different collectives, or the same one with different shapes or dtypes."""


class PeerLostError(NeuronDistributedError):
    """Another rank of the group failed or stopped calling collectives."""
