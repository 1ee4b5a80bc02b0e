"""The settings backend="neuron" reads, declared once (same form as torch_neuronx.settings)."""

from __future__ import annotations

from ..settings import Setting

SETTINGS = [
    Setting("NEURON_SIM_CC_ALGORITHM", str, "auto",
            "Collective algorithm the timing model uses: auto (the runtime's choice by size and "
            "topology), mesh, rdh (recursive halving/doubling), kangaring, ring or hierarchical."),
    Setting("NEURON_SIM_CHECK_COLLECTIVES", bool, True,
            "Before each collective, ranks compare op, shapes, dtypes and simulated clocks (one "
            "small gloo all-gather): mismatches raise on every rank, and a rank that arrives "
            "later in simulated time makes the others wait. 0 skips both."),
]

_BY_NAME = {s.name: s for s in SETTINGS}


def get(name: str, environ=None):
    return _BY_NAME[name].read(environ)
