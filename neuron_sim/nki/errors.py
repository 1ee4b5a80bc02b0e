"""Typed errors of the NKI front end.

Every error raised while tracing a kernel names the kernel source line that issued the
instruction, the instruction, what was expected and what was found, and what to do.
"""

from __future__ import annotations


class NkiError(Exception):
    """Base class. ``loc`` is ``(filename, lineno)`` in the user's kernel, when known."""

    def __init__(self, message: str, loc: tuple[str, int] | None = None,
                 instruction: str | None = None):
        self.raw_message = message
        self.loc = loc
        self.instruction = instruction
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"{self.loc[0]}:{self.loc[1]}: " if self.loc else ""
        what = f"{self.instruction}: " if self.instruction else ""
        return f"{where}{what}{self.raw_message}"


class NkiValidationError(NkiError):
    """An instruction breaks a hardware rule: tile limits, dtypes, engine/memory legality."""


class NkiPartitionError(NkiValidationError):
    """A partition range breaks the start rules (>64 partitions start at 0; 33-64 at 0/64; 1-32
    at 0/32/64/96)."""


class NkiCapacityError(NkiError):
    """Live on-chip allocations do not fit in SBUF/PSUM and the compiler could not spill them."""


class NkiOverlapError(NkiError):
    """Two explicitly placed allocations that are live at the same time overlap."""


class NkiUninitializedReadError(NkiError):
    """An instruction read memory that no instruction had written (NKI fills it with NaN)."""


class NkiUninitializedReadWarning(UserWarning):
    """Warning form of NkiUninitializedReadError (``on_uninitialized="warn"``)."""


class NkiLaunchError(NkiError):
    """The kernel launch itself is wrong: LNC mismatch, bad arguments, unknown target."""
