"""Registry of the processes using the simulated devices: one small JSON file per process.

A process that initialised the `neuron` device writes `<dir>/<pid>.json` (about once a second
while it runs, removed at exit): command, instance, LNC, the runtime core ids it sees and, per
core, its HBM use and simulated device time. `running()` reads them and drops the files of
processes that are gone (killed before they could remove theirs). Torch-free: the writer is
torch_neuronx (backend/torch_neuronx/status.py), the readers are neuron-ls and neuron-top.
"""

from __future__ import annotations

import json
import os
import tempfile


def directory() -> str:
    """Per user, under the system temporary directory (TMPDIR moves it, as tests do)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"neuron-sim-{uid}", "procs")


def publish(record: dict, d: str | None = None) -> None:
    """Write this process's record atomically (readers never see half a file) into `d`
    (default: directory())."""
    d = d or directory()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{record['pid']}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def remove(pid: int, d: str | None = None) -> None:
    try:
        os.unlink(os.path.join(d or directory(), f"{pid}.json"))
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running() -> list:
    """Records of live processes, by pid."""
    d = directory()
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".json"))
    except OSError:
        return []
    out = []
    for n in names:
        path = os.path.join(d, n)
        try:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        if not _alive(int(rec.get("pid", 0))):
            remove(int(rec.get("pid", 0)))
            continue
        out.append(rec)
    return sorted(out, key=lambda r: r["pid"])


def command_line(pid: int) -> str:
    """The command that launched `pid` (Linux /proc; empty elsewhere)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return " ".join(p.decode(errors="replace") for p in f.read().split(b"\0") if p)
    except OSError:
        return ""


def host_rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
