"""neuron_sim: a cycle-approximate AWS Trainium NeuronCore simulator. Torch-free.

Public API (what the device backend, the NKI front end and the lowering call):
  get_chip(name) / get_instance(name) / list_instances()      hardware as data
  ProgramBuilder(chip)                                         write ISA programs
  simulate(program, chip=None) -> Result                       time them
  roofline_ns(flops, bytes, dtype, chip)                       quick estimate
  execute(program, inputs)                                     run their semantics on NumPy
"""

from .errors import (CapabilityError, CapacityError, DeadlockError, DtypeError, FreeSizeError,
                     LegalityError, MemoryAccessError, NeuronSimError, PartitionError,
                     ProgramError, UnknownHardwareError)
from .hardware import Chip, Instance, get_chip, get_instance, list_chips, list_instances
from .program import AccessPattern, Memory, Program, ProgramBuilder, Tensor
from .roofline import roofline_ns
from .timing import simulate
from .trace import Result
from .interpreter import execute


__all__ = ["AccessPattern", "CapabilityError", "CapacityError", "Chip", "DeadlockError",
           "DtypeError", "FreeSizeError", "Instance", "LegalityError", "Memory",
           "MemoryAccessError", "NeuronSimError", "PartitionError", "Program", "ProgramBuilder",
           "ProgramError", "Result", "Tensor", "UnknownHardwareError", "execute", "get_chip",
           "get_instance", "list_chips", "list_instances", "roofline_ns", "simulate"]
