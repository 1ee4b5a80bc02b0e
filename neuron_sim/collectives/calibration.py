"""The collective model against the published nccom-test all-reduce example (C32 in
calibration/public.json): 2 ranks, FP32, 1 KiB to 1 GiB, hardware not stated.

Because the hardware is unknown, C32 calibrates the *shape*: the flat floor for small messages
and the linear growth for large ones come from the model's latencies (links.py), and a single
free number, the bandwidth between the two ranks, is fitted to the largest message. The fit
must then reproduce every point; `python -m neuron_sim.collectives` prints the table."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources

from .algorithms import estimate
from .fabric import fabric_for
from .links import assumed


def c32() -> dict:
    rows = json.loads(resources.files("neuron_sim.calibrate").joinpath("public.json").read_text())
    rows = rows["targets"] if isinstance(rows, dict) and "targets" in rows else rows
    if isinstance(rows, dict):
        rows = next(v for v in rows.values() if isinstance(v, list))
    return next(r for r in rows if r.get("id") == "C32")


def two_rank_fabric(bytes_per_s: float, instance: str = "trn2.3xlarge"):
    """A fabric whose two first cores exchange data at `bytes_per_s` (one direction)."""
    return dataclasses.replace(fabric_for(instance), intra_chip_bytes_per_s=bytes_per_s)


def fit_c32(instance: str = "trn2.3xlarge") -> dict:
    """Fitted bandwidth and, per point, measured and modelled microseconds."""
    row = c32()
    sizes, measured = row["result"]["bytes"], row["result"]["us"]
    chip = fabric_for(instance).chip
    # Largest message: t = launch + 2 steps of S/2 bytes, data-bound -> bw = S / (t - launch).
    bw = sizes[-1] / (measured[-1] * 1e-6 - assumed("cc_launch_s", chip))
    fabric = two_rank_fabric(bw, instance)
    points = []
    for nbytes, us in zip(sizes, measured):
        model = estimate("all_reduce", nbytes, [0, 1], fabric).seconds * 1e6
        points.append({"bytes": nbytes, "measured_us": us, "model_us": model,
                       "error": model / us - 1.0})
    return {"bytes_per_s": bw, "points": points}


def table() -> str:
    fit = fit_c32()
    lines = [f"C32 nccom-test all-reduce, 2 ranks; fitted bandwidth {fit['bytes_per_s'] / 1e9:.1f} GB/s",
             f"{'bytes':>12} {'measured us':>12} {'model us':>10} {'error':>7}"]
    for p in fit["points"]:
        lines.append(f"{p['bytes']:>12} {p['measured_us']:>12.0f} {p['model_us']:>10.1f} "
                     f"{p['error']:>+7.1%}")
    worst = max(abs(p["error"]) for p in fit["points"])
    lines.append(f"RESULT c32_max_abs_error={worst:.3f} c32_fitted_GBps={fit['bytes_per_s'] / 1e9:.1f}")
    return "\n".join(lines)
