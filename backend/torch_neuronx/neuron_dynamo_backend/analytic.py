"""What a graph is, apart from how long it runs: its compute ops and the matmul FLOPs the model
defines (for MFU), added up op by op as the lowering's walk of the graph meets them
(graph_cost.lowering_ops). Timing is the lowering's alone (graph_cost.py)."""

from __future__ import annotations

from neuron_sim.lower import normalize_name
from neuron_sim.lower.rules.movement import VIEW_OPS
from neuron_sim.roofline import model_flops

# Views move no data and launch nothing (the lowering's decision: an empty program)
_VIEWS = frozenset(VIEW_OPS)


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

    def merge(self, other: "GraphFacts", times: int = 1) -> None:
        """Adds the ops of `other`, run `times` times."""
        self.ops += other.ops * times
        self.model_flops += other.model_flops * times

    def fields(self) -> dict:
        return {"ops": self.ops, "model_flops": self.model_flops}
