"""The NKI front end: runs NKI kernels as Python, traces them into ISA programs for the
simulator core, checks them against the hardware's limits and reports their simulated time.

The user-facing package is ``nki`` (backend/nki), which re-exports this one; this package does
not import torch. Layout:

    errors.py    typed errors that carry the kernel's file:line
    dtypes.py    NKI dtypes as NumPy/ml_dtypes dtypes
    target.py    trn1/trn2/trn3 selection; the limits read from neuron_sim.hardware and the ISA modules
    tensor.py    storages and views (shape, strides, offset), indexing, reshape, ap
    tracer.py    the kernel trace: storages, instruction records, source lines, uninitialised reads
    ops.py       ALU operators and activation functions
    isa/         nki.isa: one function per instruction (checks, numerics, trace record)
    language.py  nki.language: creation, loops, SPMD ids, tile sizes, high-level ops
    memory.py    liveness-based SBUF/PSUM allocation, capacity, overlaps, spills
    program.py   traces -> ProgramBuilder programs -> the timing model
    report.py    KernelReport: time, engine activity, HFU, memory peaks, spills, findings
    launch.py    jit / simulate / benchmark, LNC and SPMD launches, environment variables
"""

from .errors import (NkiCapacityError, NkiError, NkiLaunchError, NkiOverlapError, NkiPartitionError,
                     NkiUninitializedReadError, NkiUninitializedReadWarning, NkiValidationError)
from .launch import Kernel, baremetal, benchmark, execute, jit, last_report, profile, simulate, simulate_kernel
from .report import KernelReport

__all__ = ["Kernel", "KernelReport", "NkiCapacityError", "NkiError", "NkiLaunchError", "NkiOverlapError",
           "NkiPartitionError", "NkiUninitializedReadError", "NkiUninitializedReadWarning",
           "NkiValidationError", "baremetal", "benchmark", "execute", "profile", "jit", "last_report", "simulate", "simulate_kernel"]
