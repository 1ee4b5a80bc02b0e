"""An Explorer-style summary of a profiled region or of one program: total device time, per-engine
active %, HFU / MFU / MBU, DMA bytes by kind, SBUF / PSUM / HBM peaks, top ops, a verdict on what
bounds the region, and 2-4 recommendations triggered by thresholds.

The summary is plain data (`Summary.to_dict()` is JSON): the profiler writes it next to (and
inside) `trace.json`, and `neuron-sim explorer trace.json` reads it back. Its definitions (those of
neuron_sim/trace/summary.py and Neuron Explorer's Summary Viewer) and the DMA kinds: README.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..engines import ENGINE_NAMES

ENGINES = tuple(ENGINE_NAMES.values())     # TensorE, VectorE, ScalarE, GpSimd, SyncE, DMA
DMA_KINDS = ("inputs", "weights", "intermediates", "outputs", "spill_save", "spill_reload")

# Recommendation thresholds (Explorer's, anchors.md 1.4, where it has one).
LOW_TENSOR_UTIL = 0.50        # HFU below this while matmuls are a real part of the time
MATMUL_TIME_SHARE = 0.20      # ... i.e. TensorE busy >= 20% of the time
SPILL_RELOAD_SHARE = 0.25     # spill reloads > 25% of HBM reads
TRANSPOSE_SHARE = 0.10        # transposes > 10% of TensorE time
DMA_BOUND_ACTIVE = 0.60       # DMA active >= 60% of the time ...
DMA_BOUND_RATIO = 1.5         # ... and >= 1.5x the busiest compute engine
LAUNCH_SHARE = 0.30           # eager launch overhead > 30% of device time
ESTIMATED_SHARE = 0.10        # ops timed by the roofline > 10% of device time

# A recommendation triggered by a threshold states no saving, and says why: the change it names
# (bigger tiles, another layout) is not a rewrite of the profiled ops the summary can re-time;
# its "kind" is its WHY_NOT key. Re-timed advice (torch_neuronx.profiling.advice: fused
# optimizer, one sync per step, bf16 autocast, torch.compile) carries "saving_ns" and
# "checked": "re-timed", and replaces the launch threshold's recommendation.
NOT_RETIMED = "not computed"
WHY_NOT = {
    "dma": "its remedies (a compiled region, bigger tiles or batch, resident weights) build "
           "programs the profiled eager ops do not determine; bf16, which halves the bytes, is "
           "re-timed by the bf16 advice when the profiling process summarises a trace",
    "tensor": "padding or batching changes the model's shapes; bf16 inputs are re-timed by the "
              "bf16 advice when the profiling process summarises a trace",
    "spill": "the change is inside the kernel or lowering (fewer live tiles, a split), which a "
             "profile does not rewrite",
    "transpose": "the layout change is in the model or kernel, which a profile does not rewrite",
    "graphs": "giving each graph more work changes what is compiled",
    "launch": "torch.compile of the forward and loss is re-timed by the compile advice when the "
              "profiling process summarises a trace (its saving, or a note when it does not "
              "pay), removing sync points by the sync-point advice; from a saved trace's rows "
              "the ops cannot be rewritten",
    "estimate": "a caveat on accuracy, not a change",
}
COMPILED_GRAPH_PREFIX = "neuron::graph."   # how the torch.compile backend names its launches


@dataclass
class OpRecord:
    """Everything the summary needs about one op name, accumulated over its calls."""
    name: str
    count: int = 0
    device_ns: float = 0.0          # charged on the device stream (launch included)
    launch_ns: float = 0.0
    engine_ns: dict = field(default_factory=dict)
    tensor_flops: float = 0.0
    model_flops: float = 0.0
    transpose_ns: float = 0.0
    dma_bytes: dict = field(default_factory=dict)   # kind -> bytes
    sbuf_peak_bytes_per_partition: int = 0
    psum_peak_bytes_per_partition: int = 0
    estimated: int = 0              # calls timed by the roofline (no program, no lanes)

    def add(self, other: "OpRecord") -> None:
        self.count += other.count
        for k in ("device_ns", "launch_ns", "tensor_flops", "model_flops", "transpose_ns"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        for e, v in other.engine_ns.items():
            self.engine_ns[e] = self.engine_ns.get(e, 0.0) + v
        for k, v in other.dma_bytes.items():
            self.dma_bytes[k] = self.dma_bytes.get(k, 0.0) + v
        self.sbuf_peak_bytes_per_partition = max(self.sbuf_peak_bytes_per_partition,
                                                 other.sbuf_peak_bytes_per_partition)
        self.psum_peak_bytes_per_partition = max(self.psum_peak_bytes_per_partition,
                                                 other.psum_peak_bytes_per_partition)
        self.estimated += other.estimated


@dataclass
class Summary:
    chip: str
    total_ns: float
    engine_active_ns: dict
    engine_active_percent: dict
    hfu: float
    mfu: float
    mbu: float
    tensor_flops: float
    model_flops: float
    hbm_bytes: float
    dma_bytes: dict
    sbuf_peak_bytes_per_partition: int
    psum_peak_bytes_per_partition: int
    hbm_peak_bytes: int | None
    launch_ns: float
    estimated_ns: float
    transpose_ns: float
    top_ops: list                   # [{name, count, device_ns, percent, engine_ns}]
    verdict: str
    recommendations: list           # [{title, detail, metric, threshold[, saving_ns, checked]}]
    notes: list = field(default_factory=list)
    phases: dict = field(default_factory=dict)   # explorer.phases.phase_breakdown of the trace
    not_recommended: list = field(default_factory=list)   # re-timed advice that does not pay

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Summary":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def text(self, top: int = 10) -> str:
        return format_text(self, top)


def _share(a: float, b: float) -> float:
    return a / b if b else 0.0


def verdict(active: dict, launch_share: float) -> str:
    """What bounds the region: the busiest engine if it is busy most of the time."""
    if launch_share >= 0.5:
        return "launch-bound (per-program launch overhead dominates)"
    compute = {e: v for e, v in active.items() if e not in ("DMA", "SyncE")}
    top_c = max(compute, key=compute.get) if compute else "TensorE"
    dma = active.get("DMA", 0.0)
    if dma >= DMA_BOUND_ACTIVE and dma >= DMA_BOUND_RATIO * compute.get(top_c, 0.0):
        return "DMA-bound"
    if compute.get(top_c, 0.0) >= 0.5 and compute[top_c] >= dma:
        return f"compute-bound ({top_c})"
    if dma >= 0.5:
        return "DMA-bound"
    return "latency-bound (no engine busy half of the time)"


def recommendations(s: Summary) -> list:
    """2-4 recommendations, most important first, each triggered by a documented threshold."""
    total = s.total_ns or 1.0
    act = {e: v / 100.0 for e, v in s.engine_active_percent.items()}
    reads = sum(s.dma_bytes.get(k, 0.0) for k in ("inputs", "weights", "intermediates",
                                                  "spill_reload"))
    found = []   # (score, rec)

    def rec(score, title, detail, metric, threshold, why):
        found.append((score, {"title": title, "detail": detail, "metric": metric,
                              "threshold": threshold, "kind": why,
                              "checked": f"{NOT_RETIMED}: {WHY_NOT[why]}"}))

    tensor_busy = act.get("TensorE", 0.0)
    compute_max = max((v for e, v in act.items() if e not in ("DMA", "SyncE")), default=0.0)
    if act.get("DMA", 0.0) >= DMA_BOUND_ACTIVE and act["DMA"] >= DMA_BOUND_RATIO * compute_max:
        rec(act["DMA"], "DMA-bound: data movement sets the time",
            f"DMA queues are active {100 * act['DMA']:.0f}% of the time, the busiest compute "
            f"engine {100 * compute_max:.0f}%. Raise arithmetic intensity: fuse element-wise ops "
            "(torch.compile(backend='neuron') keeps intermediates in SBUF), use bigger tiles or "
            "batch, keep weights resident.",
            f"DMA active {100 * act['DMA']:.0f}%",
            f">= {100 * DMA_BOUND_ACTIVE:.0f}% and >= {DMA_BOUND_RATIO}x compute", "dma")
    if s.tensor_flops > 0 and tensor_busy >= MATMUL_TIME_SHARE and s.hfu < LOW_TENSOR_UTIL:
        rec(1.0 - s.hfu, "Low TensorE utilisation",
            f"HFU is {100 * s.hfu:.1f}% while TensorE is busy {100 * tensor_busy:.0f}% of the time:"
            " the PE array runs partly empty (matmul dimensions below 128, small moving tiles) or "
            "waits after idle (throttle). Pad K/M to multiples of 128, batch small matmuls. "
            "bf16/fp8 inputs run the PE array faster, but each cast is an op of its own.",
            f"HFU {100 * s.hfu:.1f}%", f"< {100 * LOW_TENSOR_UTIL:.0f}%", "tensor")
    if reads and s.dma_bytes.get("spill_reload", 0.0) > SPILL_RELOAD_SHARE * reads:
        share = s.dma_bytes["spill_reload"] / reads
        rec(share, "High spill reload share",
            f"{100 * share:.0f}% of HBM reads reload spilled SBUF data. Reduce live tiles, split "
            "the kernel so working sets fit SBUF, or recompute instead of spilling.",
            f"spill reloads {100 * share:.0f}% of HBM reads", f"> {100 * SPILL_RELOAD_SHARE:.0f}%",
            "spill")
    te = s.engine_active_ns.get("TensorE", 0.0)
    if te and s.transpose_ns > TRANSPOSE_SHARE * te:
        share = s.transpose_ns / te
        rec(share, "Transposes take TensorE time",
            f"{100 * share:.0f}% of TensorE time is nc_transpose. Lay tensors out so the "
            "contraction dimension is already on partitions, or use dma_transpose.",
            f"transpose {100 * share:.0f}% of TensorE", f"> {100 * TRANSPOSE_SHARE:.0f}%",
            "transpose")
    launch = _share(s.launch_ns, total)
    graphs = _share(sum(o["device_ns"] for o in s.top_ops
                        if o["name"].startswith(COMPILED_GRAPH_PREFIX)), total)
    if launch > LAUNCH_SHARE and graphs >= 0.5:
        rec(launch, "Launch overhead dominates the compiled graphs",
            f"{100 * launch:.0f}% of device time is program launch overhead: each graph does "
            "too little work. Give each graph more (bigger batch, several steps per graph, "
            "fewer graph breaks: torch._dynamo.explain).",
            f"launch {100 * launch:.0f}%", f"> {100 * LAUNCH_SHARE:.0f}%", "graphs")
    elif launch > LAUNCH_SHARE:
        rec(launch, "Per-op launch overhead dominates",
            f"{100 * launch:.0f}% of device time is eager launch overhead. Compile the region "
            "with torch.compile(backend='neuron') and profile the compiled step (it is not "
            "always faster), or let Adaptive Eager Execution fuse more ops (avoid sync points "
            "such as .item() and print inside the loop).",
            f"launch {100 * launch:.0f}%", f"> {100 * LAUNCH_SHARE:.0f}%", "launch")
    est = _share(s.estimated_ns, total)
    if est > ESTIMATED_SHARE:
        rec(est * 0.5, "Part of the time is a roofline estimate",
            f"{100 * est:.0f}% of device time comes from ops with no lowering rule (timed by the "
            "roofline, no engine lanes): treat those numbers as bounds.",
            f"estimated {100 * est:.0f}%", f"> {100 * ESTIMATED_SHARE:.0f}%", "estimate")
    found.sort(key=lambda x: -x[0])
    return [r for _s, r in found[:4]]


def summarize(records, *, chip: str, peak_flops: float, hbm_bytes_per_s: float,
              total_ns: float | None = None, hbm_peak_bytes: int | None = None,
              notes=()) -> Summary:
    """Summary of a region from its OpRecords. `peak_flops` is the BF16 peak of the device (one
    logical core), `hbm_bytes_per_s` the MBU denominator; `total_ns` defaults to the sum of the
    ops' device time (one stream)."""
    records = list(records)
    total = float(total_ns if total_ns is not None else sum(r.device_ns for r in records))
    region = OpRecord("region", engine_ns={e: 0.0 for e in ENGINES},
                      dma_bytes={k: 0.0 for k in DMA_KINDS})
    for r in records:
        region.add(r)
    eng, dma, tf, mf = region.engine_ns, region.dma_bytes, region.tensor_flops, region.model_flops
    launch = region.launch_ns
    est = sum((r.device_ns * r.estimated / max(r.count, 1) for r in records if r.estimated), 0.0)
    hbm = sum(dma.values())
    secs = total * 1e-9
    pct = {e: (100.0 * v / total if total else 0.0) for e, v in eng.items()}
    top_ops = [{"name": r.name, "count": r.count, "device_ns": r.device_ns,
                "percent": 100.0 * _share(r.device_ns, total), "engine_ns": dict(r.engine_ns),
                "hbm_bytes": sum(r.dma_bytes.values()), "estimated": r.estimated}
               for r in sorted(records, key=lambda r: -r.device_ns)]
    s = Summary(chip=chip, total_ns=total, engine_active_ns=eng, engine_active_percent=pct,
                hfu=tf / (secs * peak_flops) if secs else 0.0,
                mfu=mf / (secs * peak_flops) if secs else 0.0,
                mbu=hbm / (secs * hbm_bytes_per_s) if secs else 0.0,
                tensor_flops=tf, model_flops=mf, hbm_bytes=hbm, dma_bytes=dma,
                sbuf_peak_bytes_per_partition=region.sbuf_peak_bytes_per_partition,
                psum_peak_bytes_per_partition=region.psum_peak_bytes_per_partition,
                hbm_peak_bytes=hbm_peak_bytes, launch_ns=launch, estimated_ns=est,
                transpose_ns=region.transpose_ns, top_ops=top_ops, verdict="", recommendations=[],
                notes=list(notes))
    s.verdict = verdict({e: v / 100.0 for e, v in pct.items()}, _share(launch, total))
    s.recommendations = recommendations(s)
    return s


def summarize_result(result, *, name: str = "program", model_flops=None, sbuf_peak: int = 0,
                     psum_peak: int = 0) -> Summary:
    """Summary of one simulated program (`neuron_sim.simulate(...)`): a single call. Its tensor
    FLOPs are the Result's HFU FLOPs (an MX FLOP weighs 0.25), so both report one HFU."""
    from ..trace.op_program import program_of_result
    op, chip = program_of_result(result, name), result.chip
    dma = {"inputs": sum(op.read_bytes_by_arg.values()), "outputs": op.write_bytes,
           "spill_save": op.spill_save_bytes, "spill_reload": op.spill_reload_bytes}
    rec = OpRecord(name, 1, result.total_ns, 0.0, dict(result.engine_busy_ns), result.hfu_flops,
                   result.matmul_flops if model_flops is None else model_flops,
                   op.transpose_ns, dma, sbuf_peak, psum_peak)
    return summarize([rec], chip=chip.name, peak_flops=chip.tensor_peak_flops("bfloat16"),
                     hbm_bytes_per_s=chip.hbm_stack_bytes_per_s)


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f} MB"


def format_text(s: Summary, top: int = 10) -> str:
    """The summary as Explorer's Summary page would read, in plain text."""
    from .phases import format_phases     # phases reads traces, which build Summaries
    lines = [f"Neuron Explorer-style summary (simulated {s.chip})",
             f"  total device time     {s.total_ns / 1e6:.3f} ms"
             + (f"  (launch overhead {s.launch_ns / 1e6:.3f} ms)" if s.launch_ns else ""),
             f"  verdict               {s.verdict}",
             (f"  HFU {100 * s.hfu:.1f}%   MFU {100 * s.mfu:.1f}%   MBU {100 * s.mbu:.1f}%   "
              f"TensorE FLOPs {s.tensor_flops / 1e9:.2f} G" if s.chip != "unknown" else
              "  HFU, MFU, MBU         unknown (no FLOPs or DMA bytes in the trace rows)"),
             "  engine active         " + "  ".join(
                 f"{e} {s.engine_active_percent.get(e, 0.0):.1f}%" for e in ENGINES
                 if s.engine_active_ns.get(e, 0.0) or e != "SyncE"),
             *([f"  device time by phase  {format_phases(s.phases, s.total_ns)}"]
               if s.phases else []),
             "  DMA bytes             " + "  ".join(
                 f"{k} {_mb(s.dma_bytes.get(k, 0.0))}" for k in DMA_KINDS)
             + f"  (HBM total {_mb(s.hbm_bytes)})",
             f"  peaks                 SBUF {s.sbuf_peak_bytes_per_partition / 1024:.1f} "
             f"KiB/partition   PSUM {s.psum_peak_bytes_per_partition / 1024:.1f} KiB/partition"
             + (f"   HBM {s.hbm_peak_bytes / 2**20:.1f} MiB" if s.hbm_peak_bytes is not None
                else "")]
    if s.top_ops:
        lines.append("  top ops by device time:")
        lines.append(f"    {'op':40s} {'calls':>6s} {'ms':>9s} {'%':>6s} {'HBM MB':>8s}")
        for o in s.top_ops[:top]:
            lines.append(f"    {o['name'][:40]:40s} {o['count']:6d} {o['device_ns'] / 1e6:9.3f} "
                         f"{o['percent']:6.1f} {o.get('hbm_bytes', 0.0) / 1e6:8.2f}"
                         + ("  (roofline)" if o.get("estimated") else ""))
    lines.append("  recommendations:" if s.recommendations else
                 "  recommendations: none (no verdict)" if s.verdict.startswith("none:") else
                 "  recommendations: none triggered")
    for i, r in enumerate(s.recommendations, 1):
        lines.append(f"    {i}. {r['title']} [{r['metric']}, threshold {r['threshold']}]")
        lines.append(f"       {r['detail']}")
        lines.append(f"       saving: {r['saving_ns'] / 1e6:.3f} ms per {r.get('per', 'step')}, "
                     "re-timed" if "saving_ns" in r else f"       saving: {r['checked']}")
    for n in s.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)
