"""Op families; importing this package registers every rule in registry.RULES."""

from . import (attention, batch_norm, elementwise, matmul, movement, norm,  # noqa: F401
               optimizer, window)
