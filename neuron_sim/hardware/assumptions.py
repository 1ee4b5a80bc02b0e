"""Every hardware number the public documents do not give, in one place: assumptions.json next
to this file, each with its unit and reasoning.

Calibration (`python -m neuron_sim.calibrate`) replaces or confirms these values; nothing else in
the simulator invents a hardware number. Values are per chip name where they differ by generation.
Sources in brackets refer to ../shared/reference/trainium-hw.md (copied facts live in
trainium-hw.json next to this file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

CHIP_NAMES = ("trn1", "trn2", "trn3")  # the chips with a data sheet (chips.py imports it here)


@dataclass(frozen=True)
class Assumption:
    name: str
    values: dict  # chip name -> value
    unit: str
    reasoning: str


def from_data(entries: dict, chips: tuple = CHIP_NAMES) -> dict[str, Assumption]:
    """Assumptions by name from data entries {value (the same on every chip) or values (chip ->
    value), unit, reasoning}; names starting with '_' are notes, not assumptions."""
    return {name: Assumption(name, e.get("values") or dict.fromkeys(chips, e["value"]), e["unit"],
                             e["reasoning"])
            for name, e in entries.items() if not name.startswith("_")}


ASSUMPTIONS: dict[str, Assumption] = from_data(json.loads(
    resources.files(__package__).joinpath("assumptions.json").read_text(encoding="utf-8")))


def value(name: str, chip: str):
    """The assumed value of `name` for chip `chip` (trn1/trn2/trn3)."""
    return ASSUMPTIONS[name].values[chip]
