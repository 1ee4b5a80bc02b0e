"""Why a compiled step is faster: one step's simulated time split into launches, per-engine busy
time and HBM traffic, for eager ops and compiled graphs alike, and a side-by-side comparison.

    eager = measure_step(lambda: train_step(model))
    compiled = measure_step(lambda: train_step(compiled_model))
    print(compare(eager, compiled))
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import metrics


@dataclass
class StepProfile:
    device_ns: int                    # simulated time the step added to the device clock
    launches: int                     # programs started: eager ops/AEE groups + compiled graphs
    graph_launches: int               # of which compiled graphs
    engine_ns: dict = field(default_factory=dict)   # busy ns per engine
    hbm_bytes: float = 0.0            # bytes to/from HBM


def run_timed(fn, device=None) -> tuple:
    """Runs `fn()` once: (the simulated ns it adds to `device`, the eager ops'
    `timing_breakdown()` and the compiled graphs' `metrics.launch_stats()` of that run)."""
    import torch_neuronx
    torch.neuron.synchronize(device)
    torch_neuronx.reset_timing_stats()
    metrics.reset_launch_stats()
    start = torch_neuronx.device_time_ns(device)
    fn()
    torch.neuron.synchronize(device)
    return (torch_neuronx.device_time_ns(device) - start, torch_neuronx.timing_breakdown(),
            metrics.launch_stats())


def summed(a: dict, b: dict) -> dict:
    """Engine times of two parts, one after the other."""
    out = dict(a)
    for e, v in b.items():
        out[e] = out.get(e, 0) + v
    return out


def measure_step(fn) -> StepProfile:
    """Runs `fn()` once and profiles the simulated time it adds to the current device."""
    total, eager, graphs = run_timed(fn)
    engines = summed(graphs["engine_ns"], eager["engine_ns"])
    return StepProfile(total, eager["launches"] + graphs["launches"], graphs["launches"],
                       {e: int(v) for e, v in engines.items()},
                       float(graphs["dma_bytes"]) + eager["hbm_bytes"])


def compare(eager: StepProfile, compiled: StepProfile, launch_ns: float | None = None) -> str:
    """A table: where the simulated time went in each mode, and the difference."""
    rows = [f"{'':22s} {'eager':>12s} {'compiled':>12s} {'saved':>12s}",
            _row("step (us)", eager.device_ns / 1e3, compiled.device_ns / 1e3),
            _row("program launches", eager.launches, compiled.launches, fmt="{:12d}")]
    if launch_ns:
        rows.append(_row("  launch overhead (us)", eager.launches * launch_ns / 1e3,
                         compiled.launches * launch_ns / 1e3))
    rows.append(_row("HBM traffic (MB)", eager.hbm_bytes / 1e6, compiled.hbm_bytes / 1e6))
    for e in sorted(set(eager.engine_ns) | set(compiled.engine_ns)):
        a, b = eager.engine_ns.get(e, 0), compiled.engine_ns.get(e, 0)
        if a or b:
            rows.append(_row(f"{e} busy (us)", a / 1e3, b / 1e3))
    return "\n".join(rows)


def _row(label, a, b, fmt="{:12.1f}"):
    return f"{label:22s} {fmt.format(a)} {fmt.format(b)} {fmt.format(a - b)}"
