"""`neuron-top`: what the processes using the simulated devices hold, refreshed every second.

Laid out as AWS's neuron-top: a title line (version, instance), the NeuronCore section (named
v2 / v3 / v3d as there), the memory usage summary (host and device), the per-core details and
the bar of process tabs ('all' plus one per process). What differs: utilisation is *simulated*
device time (the time the simulated cores were given work for), not a sampled busy ratio.

On a terminal it redraws until Ctrl-C (or `-n N` frames); when stdout is not a terminal, or with
`--once`, it prints one frame and exits, so scripts and tests never wait on it.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import layout as lay
from . import console_script, procs


def _mib(n) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def _ms(ns) -> str:
    return f"{ns / 1e6:.3f} ms"


def frame(layout, records, now=None) -> str:
    now = time.time() if now is None else now
    lines = [f"neuron-top (neuron-sim)   instance-type: {layout.instance}   "
             f"logical-neuroncore-config: {layout.lnc}   "
             f"{time.strftime('%H:%M:%S', time.localtime(now))}"]
    cores = [c for d in layout.devices for c in d.core_ids]
    per_core = {c: {"device_ns": 0, "allocated": 0, "peak": 0, "pids": []} for c in cores}
    for r in records:
        for c, st in (r.get("devices") or {}).items():
            c = int(c)
            if c in per_core:
                per_core[c]["device_ns"] += int(st.get("device_ns", 0))
                per_core[c]["allocated"] += int(st.get("allocated", 0))
                per_core[c]["peak"] = max(per_core[c]["peak"], int(st.get("peak", 0)))
                per_core[c]["pids"].append(r["pid"])
    lines += ["", f"NeuronCore {layout.neuroncore_version} Utilization (simulated device time)"]
    used = [c for c in cores if per_core[c]["pids"]]
    shown = used or cores[:8]
    for c in shown:
        lines.append(f"  NC{c:<4} {_ms(per_core[c]['device_ns']):>14}   "
                     f"pids {', '.join(str(p) for p in per_core[c]['pids']) or '-'}")
    if not used and len(cores) > len(shown):
        lines.append(f"  ... {len(cores) - len(shown)} more idle NeuronCores")
    host = [procs.host_rss_bytes(r["pid"]) for r in records]
    dev_total = sum(v["allocated"] for v in per_core.values())
    lines += ["", "Memory Usage Summary",
              f"  Host Used Memory     Total {_mib(sum(h for h in host if h) if records else 0)}",
              f"  Device Used Memory   Total {_mib(dev_total)}   Tensors {_mib(dev_total)}   "
              f"of {_mib(sum(d.memory_bytes for d in layout.devices))} on "
              f"{len(layout.devices)} device(s)"]
    lines += ["", "Memory Usage Details",
              f"  {'NeuronCore':<12} {'Device Memory':>16} {'Peak':>14}"]
    for c in shown:
        v = per_core[c]
        lines.append(f"  NC{c:<10} {_mib(v['allocated']):>16} {_mib(v['peak']):>14}")
    tabs = ["[all]"] + [f"{r['pid']}:{(r.get('command') or '?').split()[0].rsplit('/', 1)[-1]}"
                        for r in records]
    lines += ["", " > " + tabs[0] + " < " + "  ".join(tabs[1:])]
    if not records:
        lines.append("  no process is using the simulated devices")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="neuron-top", description="Memory and simulated device time "
                                 "of the processes using the simulated Neuron devices.")
    ap.add_argument("--once", action="store_true", help="print one frame and exit (the default "
                    "when stdout is not a terminal)")
    ap.add_argument("-n", "--iterations", type=int, default=0,
                    help="frames to draw, then exit (0: until Ctrl-C)")
    ap.add_argument("-d", "--delay", type=float, default=1.0, help="seconds between frames")
    args = ap.parse_args(argv)
    if args.delay <= 0:
        print("neuron-top: --delay must be > 0 seconds", file=sys.stderr)
        return 2
    try:
        layout = lay.current()
    except ValueError as e:
        print(f"neuron-top: {e}", file=sys.stderr)
        return 2
    if args.once or not sys.stdout.isatty():
        print(frame(layout, layout.processes()))
        return 0
    n = 0
    try:
        while True:
            screen = frame(layout, layout.processes())
            sys.stdout.write("\x1b[H\x1b[2J" + screen + "\n(Ctrl-C to quit)\n")
            sys.stdout.flush()
            n += 1
            if args.iterations and n >= args.iterations:
                return 0
            time.sleep(args.delay)
    except KeyboardInterrupt:
        return 0


entry = console_script(main)


if __name__ == "__main__":
    sys.exit(entry())
