"""The collective model against the published nccom-test all-reduce example (C32 in
calibration/public.json): 2 ranks, FP32, 1 KiB to 1 GiB, hardware not stated.

Because the hardware is unknown, C32 calibrates the *shape*: the flat floor for small messages
(cc_launch_floor_s) and the linear growth for large ones (cc_setup_s plus two documented 1.5 us
steps) come from the model (fabrics.json), and a single free number, the bandwidth between the
two ranks, is fitted to the largest message. The fit must then reproduce every point within 15%;
`python -m neuron_sim.collectives` prints the table."""

from __future__ import annotations

import dataclasses

from .algorithms import estimate
from .fabric import fabric_for
from .links import assumed


def fit_c32(instance: str = "trn2.3xlarge") -> dict:
    """Fitted bandwidth and, per point, measured and modelled microseconds."""
    from ..calibrate import published
    result = published()["C32"]["result"]
    sizes, measured = result["bytes"], result["us"]
    fabric = fabric_for(instance)
    # Largest message: t = setup + 2 steps of (hop + S/2 / bw) -> bw = S / (t - setup - 2 hop).
    bw = sizes[-1] / (measured[-1] * 1e-6 - assumed("cc_setup_s") - 2 * fabric.link_hop_s)
    fabric = dataclasses.replace(fabric, intra_chip_bytes_per_s=bw)   # cores 0 and 1: one chip
    points = []
    for nbytes, us in zip(sizes, measured):
        model = estimate("all_reduce", nbytes, [0, 1], fabric).seconds * 1e6
        points.append({"bytes": nbytes, "measured_us": us, "model_us": model,
                       "error": model / us - 1.0})
    return {"bytes_per_s": bw, "points": points}


_HEAD = f"{'bytes':>12} {'measured us':>12} {'model us':>10} {'error':>7}"


def _row(p) -> str:
    return f"{p['bytes']:>12} {p['measured_us']:>12.0f} {p['model_us']:>10.1f} {p['error']:>+7.1%}"


def table() -> str:
    fit = fit_c32()
    gbps = fit["bytes_per_s"] / 1e9
    lines = [f"C32 nccom-test all-reduce, 2 ranks; fitted bandwidth {gbps:.1f} GB/s",
             _HEAD] + [_row(p) for p in fit["points"]]
    worst = max(abs(p["error"]) for p in fit["points"])
    lines.append(f"RESULT c32_max_abs_error={worst:.3f} c32_fitted_GBps={gbps:.1f}")
    return "\n".join(lines)


# The nccom-test guide's multi-instance example (aws-neuron/aws-neuron-sdk
# tools/neuron-sys-tools/nccom-test.rst, Beta-era version that lists only trn1 and inf2 as
# compatible, so the two instances were trn1.32xlarge): 64-rank all-reduce over 2 instances, fp32.
# bytes -> microseconds (a subset of its 28 rows).
TWO_INSTANCE_EXAMPLE = {8: 520, 1024: 840, 65536: 1315, 1048576: 1328, 4194304: 1378,
                        16777216: 2138, 67108864: 3963, 134217728: 6279, 268435456: 11954,
                        536870912: 21803, 1073741824: 41806}


def two_instance_points() -> list:
    """Model (hierarchical, over EFA) against the example, per size. Large messages (>= 128 MiB)
    are bandwidth-bound and compared; below, latency dominates and the example's runtime (the
    Beta-era tool; its 520 us floor is what ~126 ring steps of ~4 us would give) predates the
    hierarchical algorithms the current runtime documents and this model follows, so the model
    is far faster there."""
    fabric = fabric_for("trn1.32xlarge", nodes=2)
    points = []
    for nbytes, us in TWO_INSTANCE_EXAMPLE.items():
        e = estimate("all_reduce", nbytes, list(range(64)), fabric)
        points.append({"bytes": nbytes, "measured_us": us, "model_us": e.seconds * 1e6,
                       "algorithm": e.algorithm, "error": e.seconds * 1e6 / us - 1.0,
                       "compared": nbytes >= 128 << 20})
    return points


def two_instance_table() -> str:
    note = "  (latency-bound, older runtime: not compared)"
    return "\n".join(["nccom-test all-reduce, 64 ranks on 2 x trn1.32xlarge (EFA 800 Gbit/s each)",
                      _HEAD] + [_row(p) + ("" if p["compared"] else note)
                                for p in two_instance_points()])
