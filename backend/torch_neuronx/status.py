"""Tells neuron-ls and neuron-top what this process holds on the simulated devices.

From the first time device work is timed (the first drain of the op queue), a daemon thread
publishes, about once a second, the process's command, instance, LNC, visible runtime cores and,
per core, HBM in use and simulated device time to the registry in neuron_sim/tools/procs.py; the
file is removed at exit. The thread only reads counters. A process that never uses the device
starts no thread (so `import torch` alone forks as cleanly as before).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from neuron_sim.tools import procs

INTERVAL_S = 1.0
_started: list = []
_stopping = threading.Event()


def snapshot() -> dict:
    import torch

    from . import __version__, _C, _visible
    vis = _visible()
    devices = {}
    for i, core in enumerate(vis.cores):
        stats = torch._C._accelerator_getDeviceStats(i)["allocated_bytes"]["all"]
        devices[str(core)] = {"allocated": int(stats["current"]), "peak": int(stats["peak"]),
                              # drain=False: a sync point here would end AEE groups at
                              # wall-clock moments and make simulated time vary by run.
                              "device_ns": int(_C._device_clock_ns(i, drain=False))}
    pid = os.getpid()
    return {"pid": pid, "command": procs.command_line(pid) or " ".join([sys.executable] + sys.argv),
            "instance": vis.instance.name, "lnc": vis.lnc, "cores": list(vis.cores),
            "runtime_version": __version__, "updated": time.time(), "devices": devices}


def _loop(pid, where):
    from . import _C
    while not _stopping.wait(INTERVAL_S):
        if os.getpid() != pid:       # a forked child: the parent publishes for itself
            return
        try:
            if _C._is_initialized():
                procs.publish(snapshot(), where)
        except Exception:  # noqa: BLE001 - shutting down, or a full disk: never disturb the run
            pass


def on_first_drain(cost_model):
    """The queue's cost function, starting the publisher on its first call."""
    def cost(batch, at_sync):
        if not _started:
            start()
        return cost_model(batch, at_sync)
    return cost


def start() -> None:
    pid = os.getpid()
    # The registry is fixed when publishing starts: a later change of the temporary directory
    # (a test's tmp_path) must not move this process's record into another registry.
    where = procs.directory()
    t = threading.Thread(target=_loop, args=(pid, where), name="neuron-sim-status", daemon=True)
    t.start()
    _started.append(t)
    atexit.register(_stop, t, pid, where)


def _stop(thread, pid, where) -> None:
    """At exit, before the interpreter finalizes: end the thread, then remove the record.

    _C._device_clock_ns lets the GIL go while it waits for the drain lock. Were the interpreter
    finalizing when it takes the GIL back, Python would end the thread from inside pybind11's
    gil_scoped_release destructor, which is noexcept: std::terminate, and the process aborts
    ("terminate called without an active exception") after the script's work succeeded."""
    if os.getpid() != pid:       # a forked child: the parent's thread and record are not its own
        return
    _stopping.set()
    thread.join()
    procs.remove(pid, where)
