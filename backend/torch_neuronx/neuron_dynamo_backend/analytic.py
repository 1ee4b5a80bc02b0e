"""What a graph is, apart from how long it runs: its compute ops and the matmul FLOPs the model
defines (for MFU), added up op by op as the lowering's walk of the graph meets them
(graph_cost.lowering_ops). Timing is the lowering's alone (graph_cost.py)."""

from __future__ import annotations

import math

from neuron_sim.lower import normalize_name
from neuron_sim.lower.rules.movement import VIEW_OPS

# Views move no data and launch nothing (the lowering's decision: an empty program)
_VIEWS = frozenset(VIEW_OPS)

_MATMUL = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "addbmm", "dot", "mv", "addmv"}
_CONV = {"convolution", "_convolution", "convolution_backward"}


def _matmul_flops(base: str, ins: list, outs: list) -> float:
    if not outs:
        return 0.0
    if base in ("addmm", "baddbmm", "addbmm", "addmv"):
        a = ins[1] if len(ins) > 1 else None
    else:
        a = ins[0] if ins else None
    k = a[-1] if a else 1
    return 2.0 * math.prod(outs[0]) * k


def _conv_flops(base: str, ins: list, outs: list) -> float:
    if base == "convolution_backward":
        if len(ins) < 3:
            return 0.0
        grad_out, weight = ins[0], ins[2]
        per_out = math.prod(weight) / max(weight[0], 1)
        return 2 * 2.0 * math.prod(grad_out) * per_out     # grad_input + grad_weight
    if len(ins) < 2 or not outs:
        return 0.0
    weight = ins[1]
    return 2.0 * math.prod(outs[0]) * math.prod(weight) / max(weight[0], 1)


def _attention_flops(base: str, ins: list) -> float:
    q, k = ins[0], ins[1]
    b_h = math.prod(q[:-2]) if len(q) > 2 else 1
    passes = 2 if "backward" in base else 1
    return passes * 4.0 * b_h * q[-2] * k[-2] * q[-1]


def model_flops(base: str, ins: list, outs: list) -> float:
    """The matmul FLOPs of one op (`base`: its name without namespace and overload; `ins`, `outs`:
    the shapes of its tensors, in argument order) as the model defines them (2 per multiply-add;
    no padding, transposes or recomputation): what MFU counts."""
    if base in _MATMUL:
        return _matmul_flops(base, ins, outs)
    if base in _CONV:
        return _conv_flops(base, ins, outs)
    if (base.startswith("_scaled_dot_product") or base == "scaled_dot_product_attention") \
            and len(ins) > 1:
        return _attention_flops(base, ins)
    return 0.0


class GraphFacts:
    """ops (compute ops, the lowering's views excluded; as many eager launches) and model_flops
    of the ops given to `add`."""

    def __init__(self):
        self.ops, self.model_flops = 0, 0.0

    def add(self, name: str, ins: list, outs: list) -> None:
        """One op `name` ("aten::mm", any overload) reading tensors `ins` and writing `outs`."""
        if normalize_name(name) in _VIEWS:
            return
        self.ops += 1
        shapes = [tuple(int(s) for s in t.shape) for t in ins + outs]   # SymInts to ints
        base = name.split("::", 1)[-1].split(".")[0]
        self.model_flops += model_flops(base, shapes[:len(ins)], shapes[len(ins):])

    def fields(self) -> dict:
        return {"ops": self.ops, "model_flops": self.model_flops}
