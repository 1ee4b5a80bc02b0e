"""`neuron-ls`: the simulated instance's Neuron devices and the processes using them, in the
layout of AWS's neuron-ls (instance header, one boxed row per device with its cores, core ids,
memory, NeuronLink neighbours (multi-device instances), PCI BDF, CPU affinity and NUMA node;
PID / COMMAND / RUNTIME VERSION columns when processes use the devices, one row per process).
Addresses, CPU affinity and NUMA nodes are simulated: there is no PCI device behind them."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import layout as lay
from . import console_script, procs

HEAD = [("NEURON", "DEVICE"), ("NEURON", "CORES"), ("NEURON", "CORE IDS"), ("NEURON", "MEMORY")]
LINKS = [("CONNECTED", "DEVICES")]
TAIL = [("PCI", "BDF"), ("CPU", "AFFINITY"), ("NUMA", "NODE")]
PROC_HEADERS = [("PID", ""), ("COMMAND", ""), ("RUNTIME", "VERSION")]


def users(layout, records):
    """{device index: [record, ...]}: which processes hold cores of each device."""
    out = {d.index: [] for d in layout.devices}
    for r in records:
        for dev in sorted({layout.device_of(c) for c in r.get("cores", ())} & out.keys()):
            out[dev].append(r)
    return out


def _short(cmd: str, wide: bool) -> str:
    limit = 80 if wide else 40
    return cmd if len(cmd) <= limit else cmd[:limit - 3] + "..."


def render(headers, rows, groups) -> str:
    """The boxed table: '+---+' rules, two header lines (headers: [(line1, line2)]), '| x |'
    rows; a rule after each row index in `groups` (devices that have several process rows)."""
    widths = [max([len(h[0]), len(h[1])] + [len(str(r[i])) for r in rows])
              for i, h in enumerate(headers)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [rule] + ["|" + "|".join(f" {h[line].center(w)} " for h, w in zip(headers, widths))
                    + "|" for line in (0, 1)] + [rule]
    for k, r in enumerate(rows):
        out.append("|" + "|".join(f" {str(c).ljust(w)} " for c, w in zip(r, widths)) + "|")
        if k in groups and k != len(rows) - 1:
            out.append(rule)
    out.append(rule)
    return "\n".join(out)


def text(layout, records, wide=False, self_record=None) -> str:
    by_dev = users(layout, records)
    if self_record is not None:
        for d in by_dev:
            by_dev[d] = by_dev[d] + [self_record]
    with_procs = any(by_dev.values())
    links = len(layout.devices) > 1
    rows, groups = [], set()
    for d in layout.devices:
        base = ([str(d.index), str(d.cores), lay.core_ranges(d.core_ids), lay.gb(d.memory_bytes)]
                + ([", ".join(str(c) for c in d.connected)] if links else [])
                + [d.bdf, d.cpu_affinity, str(d.numa_node)])
        if not with_procs:
            rows.append(base)
            continue
        ps = by_dev[d.index] or [None]
        for k, p in enumerate(ps):
            cells = base if k == 0 else [""] * len(base)
            rows.append(cells + ([str(p["pid"]), _short(p.get("command", ""), wide),
                                  p.get("runtime_version", "NA")] if p else ["", "", ""]))
        if len(ps) > 1 or self_record is not None:
            groups.add(len(rows) - 1)
    head = [f"instance-type: {layout.instance} (simulated by neuron-sim)",
            "instance-id: neuron-sim",
            f"logical-neuroncore-config: {layout.lnc}"]
    headers = HEAD + (LINKS if links else []) + TAIL + (PROC_HEADERS if with_procs else [])
    return "\n".join(head) + "\n" + render(headers, rows, groups)


def topology(layout) -> str:
    """The devices as a grid with their NeuronLinks (a 2D torus wraps around: '*')."""
    n = len(layout.devices)
    if n == 1:
        return "Neuron Device Topology\n  [ 0 ]"
    cols = 4 if n % 4 == 0 else n
    lines = ["Neuron Device Topology"]
    for r in range(n // cols):
        ids = range(r * cols, (r + 1) * cols)
        lines.append("  " + "*––►" + "◄––►".join(f"[{i:>2} ]" for i in ids) + "◄––*")
        if r < n // cols - 1:
            lines.append("      " + "        ".join("▲▼" for _ in ids))
    lines.append("\nLegend:\n        *––► = Wrap-around link")
    return "\n".join(lines)


def as_json(layout, records) -> list:
    by_dev = users(layout, records)
    return [{"neuron_device": d.index, "bdf": d.bdf, "connected_to": list(d.connected),
             "cpu_affinity": d.cpu_affinity, "numa_node": d.numa_node,
             "nc_count": d.cores, "logical_neuroncore_config": layout.lnc,
             "neuroncore_ids": list(d.core_ids), "memory_size": d.memory_bytes,
             "neuron_processes": [{"pid": p["pid"], "command": p.get("command", ""),
                                   "neuron_runtime_version": p.get("runtime_version", "NA")}
                                  for p in by_dev[d.index]]}
            for d in layout.devices]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="neuron-ls", description="Neuron devices of the simulated "
                                 "instance (NEURON_SIM_INSTANCE) and the processes using them.")
    ap.add_argument("-w", "--wide", action="store_true", help="do not shorten commands as much")
    ap.add_argument("-a", "--show-all-procs", action="store_true",
                    help="also list processes that do not run the Neuron runtime "
                         "(neuron-ls itself)")
    ap.add_argument("-t", "--topology", action="store_true", help="draw the devices' NeuronLinks")
    ap.add_argument("-j", "--json-output", action="store_true", help="JSON instead of the table")
    args = ap.parse_args(argv)
    try:
        layout = lay.current()
    except ValueError as e:
        print(f"neuron-ls: {e}", file=sys.stderr)
        return 2
    records = layout.processes()
    if args.json_output:
        print(json.dumps(as_json(layout, records), indent=2))
        return 0
    me = None
    if args.show_all_procs:
        me = {"pid": os.getpid(), "command": procs.command_line(os.getpid()) or "neuron-ls",
              "runtime_version": "NA"}
    print(text(layout, records, wide=args.wide, self_record=me))
    if args.topology:
        print("\n" + topology(layout))
    others = [r for r in procs.running() if r not in records]
    if others:
        print("\nprocesses on other simulated instances: " + "; ".join(
            f"{r['pid']} ({r.get('instance')}, LNC={r.get('lnc')})" for r in others))
    return 0


entry = console_script(main)


if __name__ == "__main__":
    sys.exit(entry())
