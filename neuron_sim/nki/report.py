"""What a kernel run reports: simulated time, per-engine activity, memory use, spills, findings."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np


@dataclass
class KernelReport:
    kernel: str
    target: str
    total_ns: float | None                    # simulated device time (None: no timing model)
    instructions: int                         # traced ISA instructions (all program instances)
    program_rows: int                         # rows in the core programs (matmul = LS + MM, spills)
    engine_busy_ns: dict = field(default_factory=dict)
    engine_active_percent: dict = field(default_factory=dict)
    instructions_per_engine: dict = field(default_factory=dict)
    hfu_percent: float | None = None
    mbu_percent: float | None = None          # HBM bandwidth utilisation (the busiest core)
    dma_bytes: float = 0.0
    spill_bytes: int = 0
    spills: int = 0
    sbuf_peak_bytes_per_partition: int = 0
    psum_peak_bytes_per_partition: int = 0
    sbuf_capacity_bytes_per_partition: int = 0
    psum_capacity_bytes_per_partition: int = 0
    findings: list = field(default_factory=list)
    wall_s: dict = field(default_factory=dict)
    timing: object = None                     # the core's raw results (timelines), for plots
    programs: list = field(default_factory=list)
    # per core: program row -> (traced nisa op, kernel (file, line)); None for rows the memory
    # plan added (spills). Read through instruction_times().
    sources: list = field(default_factory=list, repr=False)

    @property
    def total_us(self):
        return None if self.total_ns is None else self.total_ns / 1e3

    @property
    def total_ms(self):
        return None if self.total_ns is None else self.total_ns / 1e6

    def __str__(self):
        t = "n/a (no timing model)" if self.total_ns is None else f"{self.total_ns / 1e3:,.2f} us"
        lines = [f"kernel {self.kernel} on {self.target}: simulated time {t}",
                 f"  instructions: {self.instructions} traced, {self.program_rows} program rows"]
        if self.engine_active_percent:
            lines.append("  engine activity: " + ", ".join(
                f"{k} {v:.1f}%" for k, v in self.engine_active_percent.items()
                if self.instructions_per_engine.get(k)))
        if self.hfu_percent is not None and self.instructions_per_engine.get("TensorE"):
            lines.append(f"  TensorE HFU: {self.hfu_percent:.2f}%")
        lines.append(f"  SBUF peak {self.sbuf_peak_bytes_per_partition:,} of "
                     f"{self.sbuf_capacity_bytes_per_partition:,} B/partition; PSUM peak "
                     f"{self.psum_peak_bytes_per_partition:,} of "
                     f"{self.psum_capacity_bytes_per_partition:,}")
        if self.spills:
            lines.append(f"  spills: {self.spills} ({self.spill_bytes:,} bytes of DMA traffic)")
        for f in self.findings:
            lines.append(f"  {f}")
        return "\n".join(lines)

    def instruction_times(self, core=0, op=None) -> list[InstructionTime]:
        """Every program row of `core` with its simulated times, in program order; with `op`, only
        the rows traced from that nisa call (``op="activation"``)."""
        if not self.timing or self.timing[core] is None:
            return []
        from ..engines import Kind, stream_name
        res = self.timing[core]
        c = res.program.cols
        src = self.sources[core] if self.sources else [None] * len(res.program)
        out = []
        for i, s in enumerate(src):
            if op is not None and (s is None or s[0] != op):
                continue
            out.append(InstructionTime(
                i, res.program.opname(i), Kind(int(c["kind"][i])).name.lower(),
                stream_name(int(c["stream"][i])), s[0] if s else None, s[1] if s else None,
                float(res.start_ns[i]), float(res.data_start_ns[i]), float(res.end_ns[i]),
                float(res.busy_ns[i]), float(c["ii_ns"][i])))
        return out

    def timeline(self, width=72, core=0):
        """An ASCII engine timeline: one row per engine, each column a slice of the run, shaded by
        how busy the engine was in it (' ' idle, '.' <25%, ':' <50%, '+' <75%, '#' busy)."""
        if not self.timing or self.timing[core] is None:
            return "(no timing)"
        res = self.timing[core]
        total = res.total_ns or 1.0
        edges = np.linspace(0.0, total, width + 1)
        lines = [f"engine timeline of {self.kernel} ({total / 1e3:,.1f} us, {width} columns)"]
        for name, start, end in _engine_intervals(res):
            busy = np.zeros(width)
            for s, e in zip(start, end):
                i0, i1 = np.searchsorted(edges, [s, e], side="right") - 1
                for i in range(max(i0, 0), min(i1, width - 1) + 1):
                    busy[i] += max(0.0, min(e, edges[i + 1]) - max(s, edges[i]))
            frac = np.minimum(busy / (total / width), 1.0)
            row = "".join(" .:+#"[int(np.ceil(f * 4))] for f in frac)
            lines.append(f"{name:>8} |{row}|")
        return "\n".join(lines)

    def write_chrome_trace(self, path, core=0, limit=None):
        """Write the core's instruction timeline as Chrome/Perfetto JSON (open in
        ui.perfetto.dev)."""
        import json
        with open(path, "w") as f:
            json.dump(self.timing[core].to_chrome_trace(limit), f)
        return path

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def build(cls, kernel, target, traces, plans, timing, wall_s):
        rep = cls(kernel=kernel, target=target.name, total_ns=None,
                  instructions=sum(len(t.instrs) for t in traces), program_rows=0, wall_s=wall_s)
        per_eng = Counter()
        for tr in traces:
            per_eng.update(map(attrgetter("engine"), tr.instrs))
            rep.findings.extend(tr.findings)
        rep.instructions_per_engine = {_name(k): v for k, v in per_eng.items()}
        rep.sbuf_peak_bytes_per_partition = max(p.peak_bytes_per_partition["sbuf"] for p in plans)
        rep.psum_peak_bytes_per_partition = max(p.peak_bytes_per_partition["psum"] for p in plans)
        rep.sbuf_capacity_bytes_per_partition = target.sbuf_usable_bytes_per_partition
        rep.psum_capacity_bytes_per_partition = target.psum_bytes_per_partition
        rep.spill_bytes = sum(p.spill_bytes for p in plans)
        # one reload per spilled tile (a clean copy of an input has no store before it)
        rep.spills = sum(sp.attrs.get("when") == "reload" for p in plans for _, sp in p.spills)
        if timing is not None:
            rep.programs = [bp.program for bp in timing.built]
            rep.program_rows = sum(len(bp.program) for bp in timing.built)
            rep.timing = timing.timelines
            # (a spill's row has index -1: the None after each trace's instructions)
            ops = [[(ins.op, ins.loc) for ins in tr.instrs] + [None] for tr in traces]
            rep.sources = [[ops[k][i] for k, i in bp.source_index] for bp in timing.built]
            if all(t is not None for t in timing.timelines):
                _fill_timing(rep, timing)
        return rep


@dataclass(frozen=True)
class InstructionTime:
    """When one program row ran on its core (what a profiler's instruction track shows)."""
    row: int                  # index in the core's program
    name: str                 # program instruction: a matmul is load_stationary + nc_matmul rows
    kind: str                 # "generic", "load_stationary", "multiply_moving" or "dma"
    stream: str               # engine (TensorE, ...) or DMA queue that issued it
    op: str | None            # the traced nisa call it came from (None: a spill of the memory plan)
    loc: tuple | None         # that call's (file, line) in the kernel
    start_ns: float           # issue (DMA: trigger)
    data_start_ns: float      # DMA: first byte moves; others: start_ns
    end_ns: float
    busy_ns: float            # engine occupancy (DMA: data phase)
    ii_ns: float              # the instruction's own initiation interval (before any throttling)


def _name(engine: str) -> str:
    return {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimd",
            "sync": "SyncE", "dma": "DMA"}.get(engine, engine)


def _fill_timing(rep, timing):
    """Read the core's per-core Results: total time, per-engine active time, HFU, MBU, DMA bytes."""
    totals, busy, hfu, mbu, dma_bytes = [], {}, [], [], 0.0
    for res in timing.timelines:
        sm = res.summary
        totals.append(sm["total_ns"])
        for k, v in sm["engine_active_ns"].items():
            busy[k] = max(busy.get(k, 0.0), float(v))
        hfu.append(sm["hfu"])
        mbu.append(sm["mbu"])
        dma_bytes += sum(sm["dma_bytes"].values())
    rep.total_ns = max(totals)
    rep.engine_busy_ns = busy
    if rep.total_ns > 0:
        rep.engine_active_percent = {k: 100.0 * v / rep.total_ns for k, v in busy.items()}
    rep.hfu_percent = 100.0 * max(hfu) if hfu else None
    rep.mbu_percent = 100.0 * max(mbu) if mbu else None
    rep.dma_bytes = dma_bytes


def _engine_intervals(res):
    """(engine name, start_ns array, end_ns array) per engine of one core's Result."""
    from ..engines import ENGINE_NAMES, Engine, Kind
    c = res.program.cols
    out = []
    for e in Engine:
        m = c["engine"] == e
        if e == Engine.TENSOR:
            m &= c["kind"] != Kind.LOAD_STATIONARY
        if m.any():
            start = res.data_start_ns[m] if e == Engine.DMA else res.end_ns[m] - res.busy_ns[m]
            out.append((ENGINE_NAMES[e], start, res.end_ns[m]))
    return out
