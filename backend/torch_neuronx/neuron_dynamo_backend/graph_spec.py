"""The data the compile-time costing works on, torch-free after `describe_graph`: GraphSpec (the
ATen graph's values and ops), Target (one logical NeuronCore of the simulated instance) and
GraphCost (one program's simulated time, per engine)."""

from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass, field

import torch

# Views are access patterns over the same bytes: no engine work, no data movement.
_VIEW = {"view", "_unsafe_view", "reshape", "expand", "permute", "t", "transpose", "squeeze",
         "unsqueeze", "slice", "select", "alias", "as_strided", "detach", "split",
         "split_with_sizes", "unbind", "chunk", "unflatten", "flatten", "view_as", "narrow",
         "diagonal", "lift_fresh_copy", "_reshape_alias", "expand_as", "unfold",
         "view_as_real", "view_as_complex", "_unsafe_view_copy"}

# ---- the torch-free description of a graph ----------------------------------------------

@dataclass(frozen=True)
class Value:
    shape: tuple
    nbytes: int         # Trainium bytes: 64-bit types run in 32 bits


@dataclass(frozen=True)
class Op:
    name: str           # "aten::mm"
    ins: tuple          # value indices of tensor inputs, in argument order
    outs: tuple         # value indices of tensor outputs
    is_view: bool


@dataclass
class GraphSpec:
    values: list = field(default_factory=list)
    ops: list = field(default_factory=list)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _trainium_itemsize(dtype) -> int:
    return min(dtype.itemsize, 4)  # float64/int64 are computed and stored as 32-bit


def describe_graph(gm: torch.fx.GraphModule) -> GraphSpec:
    """Values and ops of an ATen FX graph whose nodes carry `meta["val"]` (AOT graphs do)."""
    spec = GraphSpec()
    index_of = {}   # (node, position) -> value index

    def add_value(t) -> int:
        shape = tuple(int(s) for s in t.shape)
        spec.values.append(Value(shape, math.prod(shape) * _trainium_itemsize(t.dtype)))
        return len(spec.values) - 1

    def tensors_of(val):
        if isinstance(val, torch.Tensor):
            return [(0, val)]
        if isinstance(val, (tuple, list)):
            return [(i, v) for i, v in enumerate(val) if isinstance(v, torch.Tensor)]
        return []

    def indices(*args):
        """The value indices of the nodes in `args`, in order, through nested tuples and lists."""
        found = []

        def visit(a):
            if isinstance(a, torch.fx.Node) and (a, 0) in index_of:
                found.append(index_of[(a, 0)])
            elif isinstance(a, (tuple, list)):
                for e in a:
                    visit(e)
        visit(args)
        return tuple(found)

    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder":
            if isinstance(val, torch.Tensor):
                index_of[(node, 0)] = add_value(val)
        elif node.op == "call_function":
            if node.target is operator.getitem:
                src, pos = node.args
                if (src, pos) in index_of:
                    index_of[(node, 0)] = index_of[(src, pos)]
                continue
            if not isinstance(node.target, torch._ops.OpOverload):
                continue  # symbolic-size arithmetic and the like: host side
            name = node.target._schema.name
            base_name = name.split("::", 1)[-1]
            ins = indices(node.args, tuple(node.kwargs.values()))
            outs = []
            for pos, t in tensors_of(val):
                index_of[(node, pos)] = add_value(t)
                outs.append(index_of[(node, pos)])
            spec.ops.append(Op(name, ins, tuple(outs), base_name in _VIEW))
    return spec


# ---- the target ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """The logical NeuronCore a graph is compiled for, and its launch cost (chip data)."""
    chip: str
    instance: str
    lnc: int
    launch_ns: float

    @classmethod
    def of(cls, visible) -> "Target":
        inst, lnc = visible.instance, visible.lnc
        chip = inst.chip
        # one launch: the per-NEFF start cost eager programs pay too (chip data)
        return cls(chip=chip.name, instance=inst.name, lnc=lnc,
                   launch_ns=1e9 * chip.eager_launch_s)

    def key(self) -> str:
        return f"{self.instance}/lnc{self.lnc}"


# ---- the cost -----------------------------------------------------------------------------

@dataclass
class GraphCost:
    total_ns: int                  # one launch of the whole graph, as charged to the stream
    launch_ns: int
    engine_busy_ns: dict           # engine -> busy ns inside the program
    dma_bytes: int                 # HBM traffic: graph inputs, outputs and spills
    spill_bytes: int               # intermediates that did not fit in SBUF (written + re-read)
    spills: int                    # how many intermediates spilled
    sbuf_peak_bytes: int           # largest live set of intermediates
    ops: int                       # compute ops (views excluded)
    # The same ops run one by one in eager mode, for the explanation (not charged):
    eager_launches: int
    eager_dma_bytes: int
    cost_source: str = "neuron_sim.lower"
    estimated_ops: list = field(default_factory=list)   # timed by roofline, not lowered
    # Part of total_ns that is the roofline estimate of custom (non-ATen) ops. When those ops
    # time themselves at run time (NKI kernels), the launcher swaps this for their real time.
    custom_ops_ns: int = 0
    tensor_flops: float = 0.0      # FLOPs TensorE executes (the lowered programs' matmuls)
    model_flops: float = 0.0       # the graph's matmul FLOPs as the model defines them (MFU)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "GraphCost":
        """Rebuilds a cost read from the compile cache; every field's type and range is checked
        (an entry is data from disk: a bad one raises ValueError and is recompiled)."""
        if not isinstance(data, dict):
            raise ValueError("cost is not an object")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        out = cls(**data)
        for name in _INT_FIELDS:
            _check_count(name, getattr(out, name))
        for name in ("tensor_flops", "model_flops"):
            v = getattr(out, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
                raise ValueError(f"{name} must be a finite non-negative number, got {v!r}")
        if not isinstance(out.engine_busy_ns, dict):
            raise ValueError("engine_busy_ns is not an object")
        for engine, ns in out.engine_busy_ns.items():
            _check_count(f"engine_busy_ns[{engine!r}]", ns)
        if not isinstance(out.cost_source, str):
            raise ValueError("cost_source is not a string")
        if not (isinstance(out.estimated_ops, list)
                and all(isinstance(n, str) for n in out.estimated_ops)):
            raise ValueError("estimated_ops is not a list of op names")
        if out.custom_ops_ns > out.total_ns:
            raise ValueError(f"custom_ops_ns {out.custom_ops_ns} exceeds total_ns {out.total_ns}")
        return out


_INT_FIELDS = ("total_ns", "launch_ns", "dma_bytes", "spill_bytes", "spills", "sbuf_peak_bytes",
               "ops", "eager_launches", "eager_dma_bytes", "custom_ops_ns")
# The runtime keeps simulated clocks in int64 ns; a cached count must leave room to add to them
# (2**62 ns is 146 years of simulated time).
_MAX_COUNT = 2**62


def _check_count(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _MAX_COUNT:
        raise ValueError(f"{name} must be an int in [0, 2**62), got {v!r}")
