"""Typed errors of the simulator core. Each message says what was expected, what was found, and
what to do; the attributes carry the values so callers (the NKI front end, the lowering) can point
at the user's line."""

from __future__ import annotations


class NeuronSimError(Exception):
    """Base class of every error raised by neuron_sim."""


class UnknownHardwareError(NeuronSimError, KeyError):
    """A chip or instance name that the hardware data does not list."""

    def __init__(self, kind: str, name: str, valid: list[str]):
        self.kind, self.name, self.valid = kind, name, list(valid)
        super().__init__(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(self.valid)}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return self.args[0]


class LegalityError(NeuronSimError, ValueError):
    """An instruction that the hardware cannot execute as written.

    Attributes: instruction, operand, limit, found, chip."""

    def __init__(self, instruction: str, operand: str, limit: str, found, chip: str,
                 hint: str = ""):
        self.instruction, self.operand, self.limit, self.found, self.chip = (
            instruction, operand, limit, found, chip)
        msg = (f"{instruction}: operand {operand!r} breaks a {chip} limit: expected {limit}, "
               f"found {found}")
        super().__init__(msg + (f". {hint}" if hint else ""))


class PartitionError(LegalityError):
    """Partition count above 128 or a partition start the access rules forbid."""


class FreeSizeError(LegalityError):
    """A free-dimension size above the engine's limit (moving free size, PSUM bank, bn_stats...)."""


class MemoryAccessError(LegalityError):
    """An engine touching a memory it has no port to (TensorE writes only PSUM, GpSimd has no
    PSUM)."""


class DtypeError(LegalityError):
    """A data type the engine or instruction does not support on this chip."""


class CapabilityError(LegalityError):
    """An instruction or mode this chip does not have (MX matmul before NC-v4, ...)."""


class CapacityError(NeuronSimError, MemoryError):
    """SBUF or PSUM over-allocation. Attributes: memory, requested, free, capacity, chip."""

    def __init__(self, memory: str, tensor: str, requested: int, free: int, capacity: int,
                 chip: str):
        self.memory, self.tensor, self.requested, self.free, self.capacity, self.chip = (
            memory, tensor, requested, free, capacity, chip)
        super().__init__(
            f"allocating {tensor!r} needs {requested} B per partition of {memory} but only "
            f"{free} B of {capacity} B per partition are free on {chip}; free or reuse an "
            f"earlier tile, or tile the computation smaller")


class DeadlockError(NeuronSimError, RuntimeError):
    """A semaphore wait or dependency that can never be satisfied. Attributes: engines, details."""

    def __init__(self, engines: list[str], details: str):
        self.engines, self.details = list(engines), details
        super().__init__(f"deadlock: engine(s) {', '.join(self.engines)} wait forever: {details}")


class ProgramError(NeuronSimError, ValueError):
    """A malformed program (bad operand, bad dependency index, wrong chip)."""
