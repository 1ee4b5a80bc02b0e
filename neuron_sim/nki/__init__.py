"""The NKI front end: runs NKI kernels as Python, traces them into ISA programs for the
simulator core, checks them against the hardware's limits and reports their simulated time.

The user-facing package is ``nki`` (backend/nki), which re-exports this one; this package does
not import torch. README.md lists its files and how a call runs through them.
"""

from .errors import (NkiCapacityError, NkiError, NkiLaunchError, NkiOverlapError,
                     NkiPartitionError, NkiUninitializedReadError, NkiUninitializedReadWarning,
                     NkiValidationError)
from .launch import (Kernel, baremetal, benchmark, execute, jit, last_report, profile, simulate,
                     simulate_kernel)
from .report import KernelReport

__all__ = ["Kernel", "KernelReport", "NkiCapacityError", "NkiError", "NkiLaunchError",
           "NkiOverlapError", "NkiPartitionError", "NkiUninitializedReadError",
           "NkiUninitializedReadWarning", "NkiValidationError", "baremetal", "benchmark",
           "execute", "profile", "jit", "last_report", "simulate", "simulate_kernel"]
