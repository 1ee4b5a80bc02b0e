"""NeuronProfiler: TorchNeuron's exporter (`on_trace_ready=NeuronProfiler(cfg).export_trace`) and
the Explorer-style summary of a profiled region.

Output layout (torchneuron-api.md section 8): `<out>/<host>_pid_<pid>/<timestamp>/trace.json`,
one directory per export. The simulator has no NEFF, NTFF or runtime protobufs to write, and writes
no files under those names: MODE_OUTPUT says what each mode writes instead, and `modes.json` in
the same directory records that per requested mode. trace.json also carries the summary under
the top-level key `neuronExplorer` for `neuron-sim explorer trace.json`."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time

import torch

from neuron_sim.explorer import (EXPLORER_KEY, Summary, compact_trace, is_lane_row, is_op_row,
                                 load_trace, summarize)
from neuron_sim.explorer.clock import CLOCK_KEY, check_clock, mark_clock, to_simulated_clock
from neuron_sim.explorer.summary import COMPILED_GRAPH_PREFIX

from neuron_sim.explorer.phases import (BACKWARD_ROW, OPTIMIZER_ANNOTATIONS, phase_breakdown,
                                        row_phases)
from neuron_sim.explorer.trace import LAUNCH_CATEGORY, is_launch_row

from . import advice
from .config import NeuronConfig, ProfileMode
from .hook import OPTIONS, SESSION, session_records

LANE_TID_BASE = 1000    # the Kineto plugin's lane rows use tid >= 1000 (op rows: the stream)

MODE_OUTPUT = {
    ProfileMode.DEVICE: ("device_summary.json, device_summary.txt and the engine lanes in "
                         "trace.json (simulated; no .neff/.ntff: there is no hardware capture)"),
    ProfileMode.RUNTIME: ("device rows in trace.json (simulated runtime timeline; no ntrace.pb / "
                          "trace_info.pb)"),
    ProfileMode.CPU_UTIL: "cpu_util.json (host CPU times of this process; no cpu_util.pb)",
    ProfileMode.HOST_MEMORY: "host_mem.json (peak resident set size; no host_mem.pb)",
}


def _cost_model():
    from .. import _state
    return _state["cost_model"]


def _is_lane(ev) -> bool:
    return (ev.device_type() != torch.autograd.DeviceType.CPU
            and ev.device_resource_id() >= LANE_TID_BASE)


class _WithoutLanes:
    """A profile's kineto results whose events() leave the engine-lane rows out."""

    def __init__(self, result):
        self._result = result

    def events(self):
        return [ev for ev in self._result.events() if not _is_lane(ev)]

    def __getattr__(self, name):
        return getattr(self._result, name)


def _install_lane_free_tables() -> bool:
    """Keep engine lanes out of every torch.profiler table (`events()`, `key_averages()`): they
    are annotations of the op rows, and listed beside them they read as ops of their own and push
    Self NEURON % over 100%. torch turns every Kineto activity into an event and a plugin cannot
    mark one trace-only, so the profile's parser gets the results without the lane rows (also
    sparing it ~50k events); export_chrome_trace writes the Kineto trace and keeps them. Wraps
    torch's private `profile._parse_kineto_results`; False if torch no longer has it."""
    cls = torch.autograd.profiler.profile
    parse = getattr(cls, "_parse_kineto_results", None)
    if parse is None:
        return False
    if getattr(parse, "lane_free", False):
        return True

    def _parse_kineto_results(self, result, *args, **kwargs):
        return parse(self, _WithoutLanes(result), *args, **kwargs)
    _parse_kineto_results.lane_free = True
    cls._parse_kineto_results = _parse_kineto_results
    return True


LANE_FREE_TABLES = _install_lane_free_tables()


def drop_lane_events(prof) -> int:
    """Take the engine-lane rows out of `prof.events()` (so out of `key_averages()` tables) if
    they are there (only when torch's parser could not be wrapped, see above); returns how many.
    Without the wrapper it parses the profile's events, which costs seconds on a long profile."""
    if LANE_FREE_TABLES:
        return 0
    events = getattr(getattr(prof, "profiler", None), "function_events", None)
    if not events:
        return 0
    cpu = torch.autograd.DeviceType.CPU
    kept = [e for e in events if e.device_type == cpu
            or (e.device_resource_id or 0) < LANE_TID_BASE]
    dropped = len(events) - len(kept)
    events[:] = kept
    return dropped


LAUNCH_NAME = "neuron::launch"      # the plugin's host row of a device launch


def phase_trace(prof) -> dict | None:
    """The part of a profile's Chrome trace that `neuron_sim.explorer.phases` (and the re-timed
    advice) read, made from the profile's own events without exporting it (torch writes a
    profile's trace once, and the user may still want it): each device op row with the External
    id of the op that launched it, that op as the launch row (its thread and start), and the
    optimizer and backward annotations. None when the profile has no Kineto results."""
    res = getattr(prof.profiler, "kineto_results", None) if prof.profiler else None
    if res is None:
        return None
    cpu = torch.autograd.DeviceType.CPU
    events = res.events()
    ops = sorted((ev for ev in events if ev.device_type() != cpu and not _is_lane(ev)),
                 key=lambda ev: ev.start_ns())
    rows = [{"ph": "X", "name": ev.name(), "dur": (ev.end_ns() - ev.start_ns()) / 1e3,
             "args": {"device_type": "neuron", "External id": ev.linked_correlation_id()}}
            for ev in ops]
    launched = {r["args"]["External id"] for r in rows}
    host, launches = [], {}
    for ev in events:
        if ev.device_type() != cpu:
            continue
        where = {"ph": "X", "pid": 0, "tid": ev.start_thread_id(), "ts": ev.start_ns() / 1e3}
        name = ev.name()
        cid = ev.correlation_id()
        # the op that issued the device row places its launch; the plugin's own launch event
        # with that id stands in only without one: in torch's event list it can sit far from
        # the op (3 demo GPT steps with AdamW: 368 forward and backward rows fell inside an
        # optimizer step, and the advice re-timed one step as two)
        if cid in launched and (name != LAUNCH_NAME or cid not in launches):
            launches[cid] = dict(where, name=LAUNCH_NAME, cat=LAUNCH_CATEGORY,
                                 args={"External id": cid})
        if name.startswith(OPTIMIZER_ANNOTATIONS + (BACKWARD_ROW,)):
            host.append(dict(where, name=name, dur=(ev.end_ns() - ev.start_ns()) / 1e3))
    return {"traceEvents": host + list(launches.values()) + rows}


def explorer_summary(prof=None, *, notes=(), rows=None, trace=None) -> Summary:
    """Explorer-style summary of the region `prof` (a finished torch.profiler.profile) recorded
    (or of the device rows `rows` [(name, ns)] of a saved trace); without either, of everything
    drained during the last profiling session. With `prof`, or with the region's `trace` (its
    Chrome trace as exported, before the timeline is rewritten), the summary also has the device
    time by phase and the re-timed advice (advice.py), as NeuronProfiler's has."""
    torch.neuron.synchronize()
    if trace is None and prof is not None:
        trace = phase_trace(prof)
    if rows is None and prof is not None:   # the region's device op rows (none without Kineto)
        rows = trace_rows(trace) if trace else []
    recs = session_records(rows)
    m = _cost_model()
    chip, lnc = m.chip, m.lnc
    notes = list(notes)
    if rows is not None and len(rows) != sum(r.count for r in recs):
        notes.append(f"{len(rows)} device rows in the trace, {sum(r.count for r in recs)} "
                     "matched to simulated programs")
    if any(r.name.startswith(COMPILED_GRAPH_PREFIX) for r in recs):
        notes.append("compiled graphs: engine busy, FLOPs, DMA/spill bytes and SBUF peak from "
                     "their graph cost (totals per launch, no instruction timeline)")
    if SESSION.lanes_dropped:
        notes.append(f"{SESSION.lanes_dropped} ops got no engine lanes: the session's lane budget "
                     f"({OPTIONS.max_rows} rows, NEURON_SIM_PROFILE_MAX_LANE_ROWS) was spent")
    notes.append("DMA bytes by kind: weights = the weight operand of matmul-family ops; "
                 "intermediates = reads of an earlier op's output (same storage); AEE-fused ops "
                 "are itemised by their own programs")
    hbm_peak = None
    try:
        hbm_peak = int(torch.neuron.max_memory_allocated())
        notes.append("HBM peak: torch.neuron.max_memory_allocated() (since the last "
                     "reset_peak_memory_stats)")
    except (RuntimeError, AttributeError):
        pass
    s = summarize(recs, chip=f"{chip.name} ({m.instance.name}, LNC={lnc})",
                  peak_flops=chip.tensor_peak_flops("bfloat16") * lnc,
                  hbm_bytes_per_s=chip.hbm_stack_bytes_per_s, hbm_peak_bytes=hbm_peak,
                  notes=notes)
    if trace is not None:
        phased = row_phases(trace)
        s.phases = phase_breakdown(phased=phased)
        checked = []
        for kind in (getattr(advice, name) for name in advice.RETIMED):
            try:
                r = kind(phased, s.total_ns)
            except Exception as e:  # noqa: BLE001 - advice must never cost the user the trace
                s.notes.append(f"re-timed advice {kind.__name__} failed ({type(e).__name__}: "
                               f"{e}); please report it with this trace")
                continue
            if r and not r.pop("recommended", True):    # re-timed, and it does not pay
                s.notes.append(f"not recommended: {r['title']}. {r['detail']}")
                s.not_recommended.append(r)
            elif r:
                checked.append(r)
        checked.sort(key=lambda r: -r["saving_ns"])
        if any(r["title"] == advice.COMPILE for r in checked + s.not_recommended):
            # the compile saving is re-timed (or noted as a loss): no unpriced launch advice
            s.recommendations = [r for r in s.recommendations if r.get("kind") != "launch"]
        s.recommendations = (checked + s.recommendations)[:4]   # measured savings first
    return s


def profile_call(fn, *args, **kwargs):
    """Run `fn(*args, **kwargs)` once under torch.profiler (CPU + device) and return
    (result, Summary, prof): the Explorer summary of a single call."""
    from torch.profiler import ProfilerActivity, profile
    torch.neuron.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        out = fn(*args, **kwargs)
        torch.neuron.synchronize()
    s = explorer_summary(prof)
    drop_lane_events(prof)
    return out, s, prof


# Correlation ids of launches and device rows: the External id plus this base. HTA sizes its
# row-index column from the correlation column (pandas downcast): with ids below 32768 it picks
# int16 and fails on a trace of more than 32767 events; CUPTI's ids are large too.
CORRELATION_BASE = 1 << 20


def add_analysis_fields(trace: dict) -> dict:
    """Give device op rows the args trace analysers key on (Holistic Trace Analysis treats an
    event with `args.stream` >= 0 as a device kernel): stream, device, correlation; and name the
    rank (`distributedInfo`). Lane rows stay annotations, so kernel time is not counted twice."""
    for e in trace.get("traceEvents", []):
        if is_launch_row(e):
            # HTA keeps a kernel only if a host row carries the same correlation (as
            # cudaLaunchKernel does); without it, traces with step markers lose every kernel.
            e["args"].setdefault("correlation", e["args"]["External id"] + CORRELATION_BASE)
            continue
        if not is_op_row(e):
            continue
        args = e["args"]
        args.setdefault("stream", int(e.get("tid", 0)))
        args.setdefault("device", int(e.get("pid", 0)))
        if "External id" in args:
            args.setdefault("correlation", args["External id"] + CORRELATION_BASE)
    _trim_overlaps(trace)
    rank = 0
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank = torch.distributed.get_rank()
    trace.setdefault("distributedInfo", {"rank": rank})
    return trace


def _trim_overlaps(trace: dict) -> None:
    """Device rows of one thread are flat (serial ops, merged lane spans), but timestamps in
    microseconds of a ~1e12 us clock keep only about 1 ns, so neighbours can overlap by a
    nanosecond, which Perfetto reports as improperly nested slices. Trim the earlier row."""
    threads = {}
    for e in trace.get("traceEvents", []):
        if is_op_row(e) or is_lane_row(e):
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for rows in threads.values():
        rows.sort(key=lambda e: e["ts"])
        for a, b in zip(rows, rows[1:]):
            if a["ts"] + a["dur"] > b["ts"]:
                a["dur"] = max(round(b["ts"] - a["ts"], 3), 0.0)


def set_clock(trace: dict, clock: str) -> dict:
    """Put `trace` on the simulated clock (`neuron_sim.explorer.clock`), using the queue drains
    the profiling hook recorded in this process, or mark it as a wall-clock trace."""
    if check_clock(clock) == "wall":
        return mark_clock(trace, "wall")
    return to_simulated_clock(trace, drains_ns=list(SESSION.drains) or None)


def trace_rows(trace: dict) -> list:
    """[(name, ns)] of a trace's device op rows (read from the trace, which the exporter has
    parsed already: walking the profile's events again costs seconds on a long profile)."""
    return [(e["name"], int(round(float(e["dur"]) * 1e3)))
            for e in trace.get("traceEvents", []) if is_op_row(e)]


def _attach_session_summary(trace: dict) -> None:
    """In the process that profiled, the profiling hook still holds the simulated program of
    each device row: give the trace the same `neuronExplorer` summary NeuronProfiler writes, so
    `neuron-sim explorer` reads one verdict from either trace. Skipped when the rows do not
    match this process's last session (a trace from elsewhere)."""
    rows = trace_rows(trace)
    if not rows or not SESSION.entries:
        return
    recs = session_records(rows)
    if sum(r.count for r in recs) < 0.9 * len(rows):
        return
    s = explorer_summary(rows=rows, trace=trace)
    m = _cost_model()
    trace[EXPLORER_KEY] = {"simulated": True, "instance": m.instance.name, "lnc": m.lnc,
                           "summary": s.to_dict()}


def prepare_trace(path, clock: str = "wall") -> str:
    """Rewrite a trace saved by `prof.export_chrome_trace` (or tensorboard_trace_handler) in
    place, compact, with the analysis fields above; returns the path. `clock="simulated"`
    places it on the simulated clock (run it in the process that profiled, so the
    synchronisation points are known; otherwise each ProfilerStep end counts as one)."""
    trace = load_trace(path)
    check_clock(clock)
    if EXPLORER_KEY not in trace:
        _attach_session_summary(trace)
    if (trace.get(CLOCK_KEY) or {}).get("clock") != "simulated":
        set_clock(trace, clock)
    compact_trace(add_analysis_fields(trace))
    _write(path, json.dumps(trace, separators=(",", ":")))
    return path


def _write(path, text: str) -> None:
    # callers encode with json.dumps, in one C call; json.dump(obj, file) goes chunk by chunk
    # through Python, about three times slower on a 90 MB trace.
    with open(path, "w") as f:
        f.write(text)


class NeuronProfiler:
    """Exporter for torch.profiler: `on_trace_ready=NeuronProfiler(cfg).export_trace`."""

    def __init__(self, config: NeuronConfig | None = None, *, clock: str = "simulated",
                 **kwargs):
        self.config = config if config is not None else NeuronConfig(**kwargs)
        self.clock = check_clock(clock)   # "simulated" (Trn-shaped timeline) or "wall"
        self.exports: list = []      # output directories written, oldest first

    @property
    def last_output_dir(self):
        return self.exports[-1] if self.exports else None

    def _dir(self) -> str:
        host = socket.gethostname().split(".")[0] or "localhost"
        base = os.path.join(self.config.profile_output_dir, f"{host}_pid_{os.getpid()}")
        stamp = time.strftime("%Y%m%d_%H%M%S") + f"_{int(time.time() * 1e6) % 1_000_000:06d}"
        path = os.path.join(base, stamp)
        os.makedirs(path, exist_ok=False)
        return path

    def export_trace(self, prof) -> str:
        """Write this profile's files; returns the output directory."""
        cfg = self.config
        out = self._dir()
        fd, tmp = tempfile.mkstemp(suffix=".json", dir=out)
        os.close(fd)
        prof.export_chrome_trace(tmp)
        trace = load_trace(tmp)
        os.remove(tmp)
        rows = trace_rows(trace)
        dropped = self._filter(trace)
        notes = [f"capture_enabled_for_nc / max_events_per_nc dropped {dropped} device rows "
                 "(lanes of uncaptured cores or past the cap)"] if dropped else []
        s = explorer_summary(notes=notes, rows=rows, trace=trace)
        set_clock(trace, self.clock)
        compact_trace(add_analysis_fields(trace))
        m = _cost_model()
        trace[EXPLORER_KEY] = {"simulated": True, "clock": self.clock,
                               "instance": m.instance.name, "lnc": m.lnc,
                               "modes": [x.name for x in cfg.modes], "summary": s.to_dict()}
        _write(os.path.join(out, "trace.json"), json.dumps(trace, separators=(",", ":")))
        files = {}
        manifest = {"simulated": True, "note": "neuron-sim has no hardware capture; each mode "
                    "lists what the simulator wrote instead", "modes": {}}
        for mode in cfg.modes:
            manifest["modes"][mode.name] = MODE_OUTPUT[mode]
            if mode == ProfileMode.DEVICE:
                files["device_summary.json"] = json.dumps(s.to_dict(), indent=1)
                files["device_summary.txt"] = s.text() + "\n"
            elif mode == ProfileMode.CPU_UTIL:
                t = os.times()
                files["cpu_util.json"] = json.dumps({"user_s": t.user, "system_s": t.system,
                                                     "loadavg": list(os.getloadavg()),
                                                     "cpus": os.cpu_count()})
            elif mode == ProfileMode.HOST_MEMORY:
                import resource
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                files["host_mem.json"] = json.dumps({"peak_rss_bytes": peak})
        files["modes.json"] = json.dumps(manifest, indent=1)
        for name, text in files.items():
            _write(os.path.join(out, name), text)
        self.exports.append(out)
        drop_lane_events(prof)
        return out

    def _filter(self, trace) -> int:
        """capture_enabled_for_nc keeps the device rows of those cores; max_events_per_nc caps
        the instruction-level rows (engine lanes) per core, as on hardware it caps captured
        events. Op rows always stay: they carry the device time."""
        cores, cap = self.config.cores, self.config.max_events_per_nc
        if cores is None and cap is None:
            return 0
        events = trace.get("traceEvents", [])
        kept, per_nc = [], {}
        for e in events:
            lane, nc = is_lane_row(e), e.get("pid")
            if (lane or is_op_row(e)) and cores is not None and nc not in cores:
                continue
            if lane:
                per_nc[nc] = per_nc.get(nc, 0) + 1
                if cap is not None and per_nc[nc] > cap:
                    continue
            kept.append(e)
        trace["traceEvents"] = kept
        return len(events) - len(kept)
