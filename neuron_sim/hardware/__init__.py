"""Chips and instances as data (see README.md in the package root)."""

from .assumptions import ASSUMPTIONS, Assumption
from .chips import CHIP_NAMES, SAME_CORE_CHIPS, Chip, get_chip, list_chips
from .instances import Instance, get_instance, list_instances

__all__ = ["ASSUMPTIONS", "Assumption", "CHIP_NAMES", "Chip", "Instance", "SAME_CORE_CHIPS",
           "get_chip", "get_instance", "list_chips", "list_instances"]
