"""neuron_sim.lower: ATen ops (names + shapes, no torch) to ISA programs, timed and cached.
See README.md for the API; rules live in rules/, one file per op family."""

from .api import ENGINES, Timing, is_elementwise, lower_op, lower_sequence, warm_up
from .assumptions import AEE_MAX_OPS
from .cache import ProgramCache
from .estimate import estimate, estimate_bytes
from .registry import RULES, LoweringError, has_rule, lowers, rule_for
from .spec import OpSpec, TensorSpec, device_dtype, normalize_name
from . import rules  # noqa: F401  (registers every op family)

__all__ = ["AEE_MAX_OPS", "ENGINES", "LoweringError", "OpSpec", "ProgramCache", "RULES",
           "TensorSpec", "Timing", "device_dtype", "estimate", "estimate_bytes", "has_rule",
           "is_elementwise", "lower_op", "lower_sequence", "lowers", "normalize_name", "rule_for",
           "warm_up"]
