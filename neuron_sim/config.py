"""Settings of the simulator, each declared once with type, default and help. Read from the
environment at call time (never cached), so tests can flip them."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: object
    help: str

    def get(self):
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        if self.type is bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        return self.type(raw)


SETTINGS = {s.name: s for s in [
    Setting("NEURON_SIM_REFERENCE", bool, False,
            "Run the timing model through the pure-Python reference instead of the numba kernel "
            "(slow; for debugging and for checking the kernel)."),
    Setting("NEURON_SIM_DEFAULT_CHIP", str, "trn2",
            "Chip used when a caller does not name one (roofline_ns, ProgramBuilder())."),
]}


def get(name: str):
    return SETTINGS[name].get()
