"""ALU operators and activation functions, by name, with their NumPy definitions.

``nl.add``, ``nl.exp`` ... are objects of these classes. Passed to an ``nki.isa`` instruction
(``op=nl.add``) they name the operator; called directly (``nl.add(x, y)``) they run the
high-level ``nki.language`` operation, which emits the instruction that computes it.
All arithmetic is float32 inside the engines [ArchV2]; integer bit-vector ops act on bits.
"""

from __future__ import annotations

from ..isa import alu as core_alu
from ..isa.scalar import activation as core_activation

class AluOp:
    """A binary (or unary) ALU operator usable by VectorE/GpSimd/ScalarE instructions."""

    def __init__(self, name, fn, reduce=None):
        self.name, self.fn, self.reduce = name, fn, reduce

    def __call__(self, *args, **kwargs):
        from . import language
        return getattr(language, "_alu_call")(self, *args, **kwargs)

    def __repr__(self):
        return f"nl.{self.name}"


class ActFn:
    """An activation function of the Scalar Engine: ``func(in * scale + bias)``."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __call__(self, x, dtype=None, **kwargs):
        from . import language
        return language._act_call(self, x, dtype=dtype, **kwargs)

    def __repr__(self):
        return f"nl.{self.name}"


# The operators' definitions are the simulator core's (neuron_sim/isa/alu.py,
# isa/scalar/activation.py); here they get their nl.* objects.
ALU = {name: AluOp(name, fn, reduce=core_alu.REDUCE.get(name))
       for name, fn in core_alu.BINARY.items() if name not in ("max", "min")}
ACT = {name: ActFn(name, fn) for name, fn in core_activation.FUNCTIONS.items()}
