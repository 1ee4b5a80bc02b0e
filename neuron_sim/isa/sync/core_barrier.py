"""core_barrier: both programs of an LNC=2 launch wait here until the other arrives (NC-v3+)
[ISA]. Each core writes a semaphore of the other (the remote update) and then waits on its own
(the local wait) [ISA]: two rows of zero SyncE cycles, both named core_barrier. The first
(`MEETS`: the signal) is ordered after this core's writes to the shared tensor `data`; the
second waits until the other core's signal has landed (timing.simulate.simulate_cores: the
other core's signal time plus the chip's core_pair_semaphore_latency_s) and, as seen from this
core, publishes the other core's writes to `data`: later reads and writes of `data` wait for
it."""

from __future__ import annotations

from ...engines import Engine
from ...errors import CapabilityError
from ..common import READ, make

NAME = "core_barrier"
OPERANDS = {"data": READ}     # read by no engine port (only ordered after): no check_operands
MEETS = True                  # rows: the signal to the other core, then the wait for its signal


def build(chip, data=None):
    if not chip.has_lnc2:
        raise CapabilityError(NAME, "data", "a chip with two NeuronCores per logical core (LNC=2, "
                              "NC-v3+)", f"{chip.name}, one NeuronCore per logical core",
                              chip.name, "there is no other core to wait for: remove the "
                              "barrier, or launch on a chip with LNC=2")
    shared = () if data is None else (data,)
    return (make(NAME, Engine.SYNC, 0, 0, shared, ()),
            make(NAME, Engine.SYNC, 0, 0, shared, shared))


def semantics(state, emit):
    """No architectural effect on one core's data."""
