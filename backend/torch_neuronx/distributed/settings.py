"""The settings backend="neuron" reads; declared in `torch_neuronx.settings` (part
"distributed") with the project's one `Setting` class."""

from __future__ import annotations

from ..settings import DISTRIBUTED_SETTINGS as SETTINGS
from ..settings import get as _get

__all__ = ["SETTINGS", "get"]


def get(name: str, environ=None):
    return _get(name, environ)
