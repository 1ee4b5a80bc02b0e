"""matplotlib figures of a Summary and of engine lanes (matplotlib is imported only here, and
only when a figure is asked for: `neuron_sim` does not depend on it)."""

from __future__ import annotations

import sys

from .lanes import lane_order
from .summary import DMA_KINDS, ENGINES

_COLORS = {"TensorE": "#d62728", "VectorE": "#1f77b4", "ScalarE": "#2ca02c", "GpSimd": "#9467bd",
           "SyncE": "#7f7f7f", "DMA": "#ff7f0e"}


def _plt():
    try:
        import matplotlib
        if matplotlib.get_backend().lower() in ("", "agg") or "ipykernel" not in sys.modules:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("figures need matplotlib: pip install 'torch-neuronx[notebooks]' "
                          "or pip install matplotlib") from e
    return plt


def plot_summary(summary, top: int = 8):
    """One figure, three panels: engine active %, DMA bytes by kind, top ops by device time."""
    plt = _plt()
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4), constrained_layout=True)
    eng = [e for e in ENGINES if e != "SyncE" or summary.engine_active_ns.get(e)]
    a.barh(eng, [summary.engine_active_percent.get(e, 0.0) for e in eng],
           color=[_COLORS[e] for e in eng])
    a.set_xlim(0, 100)
    a.invert_yaxis()
    a.set_xlabel("active % of device time")
    a.set_title(f"engines  (HFU {100 * summary.hfu:.0f}%, MFU {100 * summary.mfu:.0f}%, "
                f"MBU {100 * summary.mbu:.0f}%)")
    b.bar(range(len(DMA_KINDS)), [summary.dma_bytes.get(k, 0.0) / 1e6 for k in DMA_KINDS],
          color="#ff7f0e")
    b.set_xticks(range(len(DMA_KINDS)), [k.replace("_", " ") for k in DMA_KINDS], rotation=30,
                 ha="right")
    b.set_ylabel("MB")
    b.set_title("DMA bytes by kind")
    ops = summary.top_ops[:top]
    c.barh([o["name"][-30:] for o in ops], [o["device_ns"] / 1e6 for o in ops], color="#555555")
    c.invert_yaxis()
    c.set_xlabel("device ms")
    c.set_title(f"top ops ({summary.verdict.split(' (')[0]})")
    return fig


def plot_lanes(spans, title: str = "engine lanes", ax=None):
    """Engine timeline of one op or program: `spans` from `lane_spans`."""
    plt = _plt()
    lanes = sorted({s.lane for s in spans}, key=lane_order)
    if ax is None:
        fig, ax = plt.subplots(figsize=(12, 0.35 * len(lanes) + 1.2), constrained_layout=True)
    else:
        fig = ax.figure
    for y, lane in enumerate(lanes):
        bars = [(s.offset_ns / 1e3, s.duration_ns / 1e3) for s in spans if s.lane == lane]
        color = _COLORS.get(lane.split(" ")[0], "#ff7f0e")
        ax.broken_barh(bars, (y - 0.4, 0.8), color=color)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("us")
    ax.set_title(title)
    return fig
