"""Result of a simulation: per-instruction times, per-engine timelines and the summary the
profiler would show (total time, per-engine active %, HFU, MFU, MBU, DMA bytes by direction).
Exporters only read these records.

Definitions (after [Explorer]):
- engine active time: TensorE = sum of MultiplyMoving durations (LoadStationary runs in the
  background); VectorE/ScalarE/GpSimd/SyncE = sum of their instructions' occupancy; DMA = time
  during which at least one transfer is moving data (union of data phases).
- HFU = TensorE FLOPs executed / (total time x BF16 peak of one core = rows x cols x 2 x clock).
- MFU = model FLOPs / (total time x the same peak).
- MBU = HBM bytes moved / (total time x one HBM stack's bandwidth), the profiler's denominator."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ..engines import DMA_DIR_NAMES, ENGINE_NAMES, Engine, Kind, stream_name


class Result:
    def __init__(self, program, chip, start, end, dstart, busy, model_flops=None):
        self.program, self.chip = program, chip
        self.start_ns, self.end_ns, self.data_start_ns, self.busy_ns = start, end, dstart, busy
        self._model_flops = model_flops

    @property
    def total_ns(self) -> float:
        return float(self.end_ns.max()) if self.end_ns.size else 0.0

    @cached_property
    def engine_busy_ns(self) -> dict:
        from ..kernels.timing import _union_length
        c = self.program.cols
        eng, kind = c["engine"], c["kind"]
        out = {}
        for e in Engine:        # int(e): NumPy compares with an IntEnum member ~4x slower
            if e == Engine.DMA:
                m = eng == int(e)
                out[ENGINE_NAMES[e]] = float(_union_length(self.data_start_ns[m], self.end_ns[m]))
            elif e == Engine.TENSOR:
                out[ENGINE_NAMES[e]] = float(
                    self.busy_ns[(eng == int(e)) & (kind != int(Kind.LOAD_STATIONARY))].sum())
            else:
                out[ENGINE_NAMES[e]] = float(self.busy_ns[eng == int(e)].sum())
        return out

    @cached_property
    def matmul_flops(self) -> float:
        """FLOPs of the nc_matmul* instructions: the model FLOPs unless the caller knows better."""
        mm = [i for i, n in enumerate(self.program.opnames) if n.startswith("nc_matmul")]
        return float(self.program.cols["flops"][np.isin(self.program.cols["op"], mm)].sum())

    @cached_property
    def hfu_flops(self) -> float:
        """HFU's FLOPs, in BF16 equivalents: the profiler weighs an MX FLOP 0.25 [Explorer], so a
        PE array busy with MX matmuls reads 100%, not 400%."""
        c, chip = self.program.cols, self.chip
        flops = float(c["flops"].sum())
        mx = [i for i, n in enumerate(self.program.opnames) if n == "nc_matmul_mx"]
        if not mx:
            return flops
        mx_flops = float(c["flops"][np.isin(c["op"], mx)].sum())
        peak = chip.tensor_peak_flops("bfloat16")
        return flops - mx_flops * (1 - peak / chip.tensor_peak_flops("float8_e4m3fn_x4"))

    @cached_property
    def summary(self) -> dict:
        c, chip = self.program.cols, self.chip
        total = self.total_ns
        peak = chip.tensor_peak_flops("bfloat16")
        flops = float(c["flops"].sum())
        model_flops = self.matmul_flops if self._model_flops is None else self._model_flops
        dma = c["engine"] == Engine.DMA
        by_dir = {name: float(c["dma_bytes"][dma & (c["dma_dir"] == d)].sum())
                  for d, name in DMA_DIR_NAMES.items()}
        hbm_bytes = by_dir["hbm->sbuf"] + by_dir["sbuf->hbm"] + 2 * by_dir["hbm->hbm"]
        secs = total * 1e-9
        busy = self.engine_busy_ns
        return {
            "chip": chip.name,
            "instructions": len(self.program),
            "total_ns": total,
            "engine_active_ns": busy,
            "engine_active_percent": {k: (100.0 * v / total if total else 0.0)
                                      for k, v in busy.items()},
            "tensor_flops": flops,
            "model_flops": model_flops,
            "hfu": self.hfu_flops / (secs * peak) if secs else 0.0,
            "mfu": model_flops / (secs * peak) if secs else 0.0,
            "mbu": hbm_bytes / (secs * chip.hbm_stack_bytes_per_s) if secs else 0.0,
            "dma_bytes": by_dir,
            "instruction_counts": self.program.counts(),
        }

    # ---- timelines and records ----------------------------------------------------------------
    def timeline(self, engine) -> np.ndarray:
        """Rows (index, start_ns, end_ns) of one engine's instructions in program order."""
        e = Engine(engine) if not isinstance(engine, str) else \
            {v: k for k, v in ENGINE_NAMES.items()}[engine]
        idx = np.nonzero(self.program.cols["engine"] == e)[0]
        return np.stack([idx.astype(np.float64), self.start_ns[idx], self.end_ns[idx]], axis=1)

    def records(self, limit: int | None = None) -> list[dict]:
        """One dict per instruction (name, stream, start, end, data start, busy): the trace."""
        c = self.program.cols
        n = len(self.program) if limit is None else min(limit, len(self.program))
        return [{"index": i, "name": self.program.opname(i),
                 "stream": stream_name(int(c["stream"][i])),
                 "start_ns": float(self.start_ns[i]), "end_ns": float(self.end_ns[i]),
                 "data_start_ns": float(self.data_start_ns[i]), "busy_ns": float(self.busy_ns[i])}
                for i in range(n)]

    def to_chrome_trace(self, limit: int | None = None) -> dict:
        """Chrome/Perfetto JSON (one track per stream), from the records only."""
        ev = [{"name": r["name"], "ph": "X", "pid": 0, "tid": r["stream"],
               "ts": r["data_start_ns"] / 1e3,
               "dur": max(r["end_ns"] - r["data_start_ns"], 0) / 1e3}
              for r in self.records(limit)]
        return {"traceEvents": ev, "displayTimeUnit": "ns"}

    def __repr__(self):
        return f"Result(total_ns={self.total_ns:.1f}, instructions={len(self.program)})"
