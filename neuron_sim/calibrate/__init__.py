"""Calibration against the published measurements in public.json (a copy of
../shared/calibration/public.json shipped with the package).

`run()` builds every single-core workload as an ISA program (programs.py), simulates it and
returns one Row per published metric. Rows marked `asserted=False` are printed with the reason
they cannot be compared; the tolerance (each asserted row within 15%, median within 7%) applies
to the others. `python -m neuron_sim.calibrate` prints the table."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from importlib import resources

import numpy as np

from ..engines import Engine, Kind
from ..timing import simulate
from . import programs as P

TOLERANCE_EACH = 0.15
TOLERANCE_MEDIAN = 0.07


@dataclass
class Row:
    id: str
    metric: str
    hardware: str
    published: float
    simulated: float
    asserted: bool = True
    note: str = ""

    @property
    def error(self) -> float:
        return abs(self.simulated - self.published) / abs(self.published)


def published() -> dict:
    with resources.files(__package__).joinpath("public.json").open() as f:
        return {t["id"]: t for t in json.load(f)["targets"]}


def _matmul_rows(pub) -> list[Row]:
    res = pub["C1-C4"]["result"]
    rows = []
    stages = [("C1", P.matmul_tiled), ("C2", P.matmul_hoist_load), ("C3", P.matmul_block_free),
              ("C4", P.matmul_fully_blocked)]
    for k, (cid, fn) in enumerate(stages):
        r = simulate(fn("trn1"))
        rows.append(Row(cid, "latency_ms", "trn1", res["latency_ms"][k], r.total_ns / 1e6))
        rows.append(Row(cid, "hfu_percent", "trn1", res["hfu_percent"][k], 100 * r.summary["hfu"]))
    return rows


def _c8_rows(pub) -> list[Row]:
    """Every C8 row from one program: the v5 kernel as it fits in Trn2's SBUF (one buffer per
    block, refilled operand by operand; the partial sums that do not fit spilled)."""
    res = pub["C8"]["result"]
    prog = P.kernel_opt_v5("trn2")
    s = simulate(prog).summary
    act = s["engine_active_percent"]
    pe = (prog.cols["engine"] == Engine.TENSOR) & (prog.cols["kind"] != Kind.GENERIC)
    spilled = sum(prog.cols["dma_bytes"][i] for i, e in enumerate(prog.emits)
                  if e is not None and "spill" in e.params)
    traffic = f"includes {spilled / 1e6:.0f} MB of spill stores and reloads"
    return [
        Row("C8", "tensor_active_ms", "trn2", res["tensor_active_ms"],
            s["engine_active_ns"]["TensorE"] / 1e6),
        Row("C8", "tensor_active_percent", "trn2", res["tensor_active_percent"], act["TensorE"]),
        Row("C8", "hfu_percent", "trn2", res["hfu_percent"], 100 * s["hfu"]),
        Row("C8", "vector_active_percent", "trn2", res["vector_active_percent"], act["VectorE"],
            note="partial-sum adds (and the copies that pack results)"),
        Row("C8", "matmul_instructions", "trn2", res["matmul_instructions"], float(pe.sum()),
            note="LoadStationary + MultiplyMoving, as the profiler counts them"),
        Row("C8", "dma_active_ms", "trn2", res["dma_active_ms"],
            s["engine_active_ns"]["DMA"] / 1e6, note=traffic),
        Row("C8", "dma_active_percent", "trn2", res["dma_active_percent"], act["DMA"],
            note=traffic),
        Row("C8", "mbu_percent", "trn2", res["mbu_percent"], 100 * s["mbu"], note=traffic),
    ]


def _dma_rows(pub) -> list[Row]:
    r15 = simulate(P.dma_one_engine("trn2"))
    prog16 = P.dma_sixteen_engines("trn2")
    r16 = simulate(prog16)
    return [
        Row("C15", "ns", "trn2", pub["C15"]["result"]["ns"], float(r15.busy_ns[0]),
            note="data phase of the one engine"),
        Row("C16", "per_engine_ns", "trn2", pub["C16"]["result"]["per_engine_ns"],
            float(prog16.cols["dma_engine_ns"][0]), note="each of the 16 engines"),
        Row("C16", "trigger_to_done_us", "trn2", pub["C16"]["result"]["trigger_to_done_us_approx"],
            float(r16.start_ns[1] - r16.start_ns[0]) / 1e3,
            note="trigger until the waiting VectorE instruction may start"),
    ]


def _scalar_row(pub) -> Row:
    prog = P.scalar_dependent_chain("trn1")
    r = simulate(prog)
    acts = np.nonzero(prog.cols["engine"] == Engine.SCALAR)[0]
    ii = float(np.diff(r.start_ns[acts]).mean())
    return Row("C17", "ii_ns", "trn1", pub["C17"]["result"]["ii_ns"], ii,
               note="start-to-start of dependent 1-element activations")


def _dge_row(pub) -> Row:
    r = simulate(P.hwdge_stream("trn2"))
    return Row("C18", "ns", "trn2", pub["C18"]["result"]["ns"],
               float(np.diff(r.start_ns).mean()),
               note="interval between hardware-DGE DMA instructions on one queue (the 600 ns "
                    "input comes back: a consistency check, not an independent fit)")


def _throttle_rows(pub) -> list[Row]:
    prog = P.tensor_burst_after_idle("trn2")
    r = simulate(prog)
    mm = np.nonzero(prog.cols["kind"] == Kind.MULTIPLY_MOVING)[0]
    ii = prog.cols["ii_ns"][mm]
    busy = r.busy_ns[mm]
    full = np.nonzero(busy <= ii * (1 + 1e-9))[0]
    ramp_ns = r.start_ns[mm[full[0]]] - r.start_ns[mm[0]] if full.size else np.inf
    res = pub["C19"]["result"]
    return [Row("C19", "initial_util", "trn2", res["initial_util"], float(ii[0] / busy[0])),
            Row("C19", "ramp_us", "trn2", res["ramp_us"], float(ramp_ns) / 1e3,
                note="burst start until a MultiplyMoving runs at full rate")]


def run() -> list[Row]:
    pub = published()
    return (_matmul_rows(pub) + _c8_rows(pub) + _dma_rows(pub) + [_scalar_row(pub)]
            + [_dge_row(pub)] + _throttle_rows(pub))


def stats(rows) -> tuple[float, float, int]:
    errs = [r.error for r in rows if r.asserted]
    return statistics.median(errs), max(errs), len(errs)


def format_table(rows) -> str:
    lines = [f"{'id':<5} {'metric':<24} {'hw':<5} {'published':>12} {'simulated':>12} "
             f"{'error':>8}  note"]
    for r in rows:
        flag = "" if r.asserted else " (not asserted)"
        lines.append(f"{r.id:<5} {r.metric:<24} {r.hardware:<5} {r.published:>12.4g} "
                     f"{r.simulated:>12.4g} {100 * r.error:>7.2f}%  {r.note}{flag}")
    med, mx, n = stats(rows)
    lines.append(f"RESULT median_err={med:.4f} max_err={mx:.4f} n={n}")
    return "\n".join(lines)
