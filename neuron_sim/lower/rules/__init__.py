"""Op families; importing this package registers every rule in registry.RULES."""

from . import attention, elementwise, matmul, movement, norm, optimizer, window  # noqa: F401
