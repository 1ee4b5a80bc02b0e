"""Which NeuronCore a kernel is traced for, and the NKI-visible limits of that core.

The target comes from, in order: ``@nki.jit(platform_target=...)``, the environment variable
``NEURON_PLATFORM_TARGET_OVERRIDE`` (``trn1``/``gen2``, ``trn2``/``gen3``, ``trn3``/``gen4``), and
otherwise ``trn3``, the default of AWS's simulator when no Neuron device is present [SimDoc].
The numbers themselves are read from the simulator's hardware data (``neuron_sim.hardware``).
"""

from __future__ import annotations

from ..hardware import CHIP_NAMES, SAME_CORE_CHIPS, Chip, get_chip
from .errors import NkiLaunchError

# NKI's spellings of a target: the chip's name, gen<N> for its NeuronCore-v<N> (the chip data's
# neuroncore_version), and the chips with the same cores (inf2) [SimDoc].
ALIASES = {alias: name for name in CHIP_NAMES
           for alias in (name, f"gen{get_chip(name).neuroncore_version}")}
ALIASES.update({other: ALIASES[f"gen{version}"] for other, version in SAME_CORE_CHIPS.items()})
DEFAULT_TARGET = "trn3"


def get_target(platform_target: str | None) -> Chip:
    """The chip a kernel is traced for (see above): its data are the limits the NKI front end
    checks."""
    from . import settings
    raw = platform_target or settings.get("NEURON_PLATFORM_TARGET_OVERRIDE") or DEFAULT_TARGET
    key = str(raw).strip().lower()
    if key not in ALIASES:
        raise NkiLaunchError(
            f"unknown platform target {raw!r}: expected one of trn1/gen2, trn2/gen3, trn3/gen4 "
            "(set NEURON_PLATFORM_TARGET_OVERRIDE or @nki.jit(platform_target=...))")
    return get_chip(ALIASES[key])
