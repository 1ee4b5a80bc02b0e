"""core_barrier: both programs of an LNC=2 launch wait here until the other arrives (NC-v3+)
[ISA]. Zero engine cycles on SyncE; it orders after this core's writes to the shared tensor.
The wait for the other core is not timed (each core's program is timed on its own)."""

from __future__ import annotations

from ...engines import Engine
from ...errors import CapabilityError
from ..common import READ, make

NAME = "core_barrier"
OPERANDS = {"data": READ}     # read by no engine port (only ordered after): no check_operands


def build(chip, data=None):
    if not chip.has_lnc2:
        raise CapabilityError(NAME, "data", "a chip with two NeuronCores per logical core (LNC=2, "
                              "NC-v3+)", f"{chip.name}, one NeuronCore per logical core",
                              chip.name, "there is no other core to wait for: remove the "
                              "barrier, or launch on a chip with LNC=2")
    return make(NAME, Engine.SYNC, 0, 0, () if data is None else (data,), ())


def semantics(state, emit):
    """No architectural effect on one core's data."""
