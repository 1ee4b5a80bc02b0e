"""Per-graph compile metrics: `get_dynamo_metrics()` / `reset_dynamo_metrics()`.

One record per compiled graph, like TorchNeuron's `NeuronCompilationMetrics`, plus what the
simulator knows: simulated compile time (reported here, never charged to the device clock),
simulated run time of one launch, engine breakdown, cache hit or miss. Totals also go to
Dynamo's counters under `torch._dynamo.utils.counters["neuron"]`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

from torch._dynamo.utils import counters

from .graph_spec import GraphCost

_lock = threading.Lock()
_records: list = []


@dataclass
class NeuronCompilationMetrics:
    """The compiled graph, and its simulated program (`cost`), whose fields read as the record's
    own: m.sim_run_ns (cost.total_ns), m.eager_launches (cost.ops), m.dma_bytes, m.spills,
    m.engine_busy_ns, m.estimated_ops... (graph_spec.GraphCost)."""
    graph_id: str                   # compile-cache key
    graph_name: str                 # {model_name}_{aot id}_{forward|backward|inference}_{n}
    model_name: str
    kind: str                       # forward / backward / inference
    graph_node_count: int
    has_collectives: bool = False
    cache_hit: bool = False
    fell_back: bool = False         # compile failed and the graph runs eagerly (cost: zeros)
    sim_compile_ns: int = 0         # simulated neuronx-cc time (or cache load on a hit)
    wall_compile_s: float = 0.0     # host time the simulator spent compiling this graph
    source: str = ""                # user lines the graph covers (where graph breaks fall)
    cost: GraphCost = field(default_factory=GraphCost)

    def __getattr__(self, name):    # called only for names that are not the record's own
        name = _COST_NAMES.get(name, name)
        if name in _COST_FIELDS:
            return getattr(self.cost, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __dir__(self):              # completion in notebooks lists the cost's fields too
        return [*super().__dir__(), *_COST_FIELDS, *_COST_NAMES]


_COST_FIELDS = frozenset(f.name for f in fields(GraphCost))
# the record's names for two of them: the simulated time of one launch, and one eager launch
# per compute op
_COST_NAMES = {"sim_run_ns": "total_ns", "eager_launches": "ops"}


def record(m: NeuronCompilationMetrics) -> None:
    with _lock:
        _records.append(m)
        c = counters["neuron"]
        c["compiled_graphs"] += 1
        if m.fell_back:
            c["fallback_graphs"] += 1
        c["sim_compile_ns"] += m.sim_compile_ns


def count(event: str, n: int = 1) -> None:
    with _lock:
        counters["neuron"][event] += n


def get_dynamo_metrics() -> list:
    """One `NeuronCompilationMetrics` per graph compiled since the last reset, in order."""
    with _lock:
        return list(_records)


def cache_stats() -> dict:
    """Compile-cache hits, misses and rebuilt (corrupted) entries since the last reset."""
    with _lock:
        c = counters["neuron"]
        return {"hits": c["cache_hit"], "misses": c["cache_miss"],
                "corrupted": c["cache_corrupted"]}


def reset_dynamo_metrics() -> None:
    with _lock:
        _records.clear()
        counters["neuron"].clear()
    reset_launch_stats()


# ---- what compiled graphs did at run time ----------------------------------------------------

_launch = {"launches": 0, "ns": 0, "dma_bytes": 0, "engine_ns": {}}


def count_launch(ns: int, engine_busy_ns: dict, dma_bytes: int) -> None:
    """Called once per compiled-graph launch (hot path: plain dict updates)."""
    _launch["launches"] += 1
    _launch["ns"] += ns
    _launch["dma_bytes"] += dma_bytes
    eng = _launch["engine_ns"]
    for e, v in engine_busy_ns.items():
        eng[e] = eng.get(e, 0) + v


def launch_stats() -> dict:
    """Launches of compiled graphs since the last reset: count, simulated ns, per-engine busy
    ns and HBM bytes."""
    return {**_launch, "engine_ns": dict(_launch["engine_ns"])}


def reset_launch_stats() -> None:
    _launch.update(launches=0, ns=0, dma_bytes=0, engine_ns={})
