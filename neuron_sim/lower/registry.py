"""The rule table: a plain dict from normalised op name ('aten::add') to the function that lowers
it. `@lowers("aten::add.Tensor", "aten::add.Scalar")` registers one function under each name's
base (overloads of one op share a rule; the rule reads the arguments). Registering a name twice
raises at import, so two files can never silently fight over an op."""

from __future__ import annotations

from ..errors import NeuronSimError
from .spec import normalize_name

RULES: dict = {}


class LoweringError(NeuronSimError, ValueError):
    """A rule cannot lower this op (unexpected arguments); the caller falls back to the
    roofline estimate and reports the op as estimated."""


def lowers(*names: str, reads=None):
    """`reads`: how the rule reads operands from SBUF other than in the flat plan (lower/reads.py),
    so a fused sequence lays out a resident intermediate for it."""
    def deco(fn):
        if reads is not None:
            fn.reads = reads
        for n in names:
            key = normalize_name(n)
            if key in RULES and RULES[key] is not fn:
                raise NeuronSimError(
                    f"lowering for {key!r} registered twice: {RULES[key].__module__}."
                    f"{RULES[key].__name__} and {fn.__module__}.{fn.__name__}; keep one")
            RULES[key] = fn
        return fn
    return deco


# (the rule families register themselves when neuron_sim.lower is imported: see __init__.py)
def has_rule(name: str) -> bool:
    return normalize_name(name) in RULES


def rule_for(name: str):
    return RULES.get(normalize_name(name))
