"""ISA programs: tensors and access patterns (ap.py), the columnar Program (program.py) and the
ProgramBuilder (builder.py) shared by the NKI front end and the op lowering. See README.md."""

from .ap import AccessPattern, Memory, Tensor, as_ap
from .builder import ProgramBuilder, engine_of
from .program import COLUMNS, Program

__all__ = ["AccessPattern", "COLUMNS", "Memory", "Program", "ProgramBuilder", "Tensor", "as_ap",
           "engine_of"]
