"""Shared pieces of the instruction functions: the per-call context (the core's rules run with
the kernel's line), reading and writing the kernel's tensors."""

from __future__ import annotations

import numpy as np

from ...errors import NeuronSimError, PartitionError
from ...numerics.rounding import store
from ..errors import NkiPartitionError, NkiValidationError
from ..tracer import current, user_loc

# ---- shared checks ---------------------------------------------------------------------------
class _Ctx:
    """Per-instruction context: the trace, the user's line and the instruction name."""

    __slots__ = ("trace", "loc", "op")

    def __init__(self, op, trace=None, loc=None):
        self.trace = current() if trace is None else trace
        self.loc = user_loc() if loc is None else loc
        self.op = op

    @property
    def chip(self):
        """The core's hardware data; generation differences are its capability flags."""
        return self.trace.target

    def fail(self, msg):
        raise NkiValidationError(msg, self.loc, f"nisa.{self.op}")

    def core(self, check, *args, **kwargs):
        """Run a rule of the ISA vocabulary (neuron_sim/isa/common.py, a module's `build`);
        its error names this kernel line, a partition-start one as an NkiPartitionError."""
        try:
            return check(*args, **kwargs)
        except PartitionError as e:
            raise NkiPartitionError(str(e), self.loc, f"nisa.{self.op}") from e
        except NeuronSimError as e:
            raise NkiValidationError(str(e), self.loc, f"nisa.{self.op}") from e

    # numerics
    def read(self, t, operand, raw=False):
        """(P, F) array of an operand, float32 (`raw`: in its storage dtype); checks it was
        written."""
        self.trace.check_initialized(t, f"nisa.{self.op}", operand, self.loc)
        if not self.trace.numerics:
            return None
        a = np.ascontiguousarray(t.np()) if raw else np.asarray(t.np(), dtype=np.float32)
        return a.reshape(t.num_partitions, -1)

    def write(self, t, values):
        """Round ``values`` to dst dtype and store them; mark the region written."""
        if self.trace.numerics and values is not None:
            store(t.np(), values, t.storage.dtype_name)
        t.mark_written()
