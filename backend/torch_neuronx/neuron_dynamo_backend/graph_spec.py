"""The data of the compile-time costing, torch-free: Target (one logical NeuronCore of the
simulated instance) and GraphCost (one program's simulated time, per engine)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

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
        chip = visible.instance.chip
        # one launch: the per-NEFF start cost eager programs pay too (chip data)
        return cls(chip=chip.name, instance=visible.instance.name, lnc=visible.lnc,
                   launch_ns=1e9 * chip.eager_launch_s)

    def key(self) -> str:
        return f"{self.instance}/lnc{self.lnc}"


# ---- the cost -----------------------------------------------------------------------------

@dataclass
class GraphCost:
    """Every field defaults to zero: GraphCost() is the cost of no program (a graph that fell
    back to eager)."""
    total_ns: int = 0              # one launch of the whole graph, as charged to the stream
    launch_ns: int = 0
    engine_busy_ns: dict = field(default_factory=dict)   # engine -> busy ns inside the program
    dma_bytes: int = 0             # HBM traffic: graph inputs, outputs and spills
    spill_bytes: int = 0           # intermediates that did not fit in SBUF (written + re-read)
    spills: int = 0                # how many intermediates spilled
    sbuf_peak_bytes: int = 0       # largest live set of intermediates
    ops: int = 0                   # compute ops (the lowering's views excluded): eager launches
    cost_source: str = ""          # what timed it: neuron_sim.lower (+ a note)
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
        for f in fields(cls):      # f.type: the annotation as text (__future__ annotations)
            v = getattr(out, f.name)
            if f.type == "int":
                _check_count(f.name, v)
            elif f.type == "float" and (isinstance(v, bool) or not isinstance(v, (int, float))
                                        or not 0 <= v < math.inf):
                raise ValueError(f"{f.name} must be a finite non-negative number, got {v!r}")
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


# The runtime keeps simulated clocks in int64 ns; a cached count must leave room to add to them
# (2**62 ns is 146 years of simulated time).
_MAX_COUNT = 2**62


def _check_count(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _MAX_COUNT:
        raise ValueError(f"{name} must be an int in [0, 2**62), got {v!r}")
