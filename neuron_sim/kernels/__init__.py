"""Private @njit kernels (flat: arrays and scalars in and out). Each has a plain-Python
specification it is tested against (timing: neuron_sim/timing/reference.py).

The kernels are compiled once and cached on disk (cache=True). numba keys a cached function on
its own file only, but schedule.py inlines timing.py's helpers: after an edit to timing.py,
schedule.py's cached code would keep the old logic. Each module therefore ends with
`drop_stale_caches(globals())`, which empties its caches whenever its own file or a file of this
package it takes functions from (transitively) changed since they were written. An edit to an
unrelated kernel file (deps.py) leaves them alone: recompiling the timing kernels costs ~1 min."""

from __future__ import annotations

import hashlib
import sys
import threading
from pathlib import Path

import numpy as np


def _source_files(namespace: dict) -> list:
    """The module's file and those of the package's modules whose functions it holds, and
    theirs in turn (what its compiled code can inline)."""
    seen, todo, files = {namespace["__name__"]}, [namespace], []
    while todo:
        ns = todo.pop()
        files.append(Path(ns["__file__"]))
        for obj in list(ns.values()):
            mod = getattr(obj, "__module__", None)
            if isinstance(mod, str) and mod.startswith(__name__ + ".") and mod not in seen \
                    and mod in sys.modules:
                seen.add(mod)
                todo.append(vars(sys.modules[mod]))
    return sorted(files)


def _sources_digest(namespace: dict) -> str:
    digest = hashlib.sha256()
    for path in _source_files(namespace):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def drop_stale_caches(namespace: dict) -> None:
    """Flush the on-disk cache of every cached dispatcher in `namespace` (a module's globals)
    unless it was written from the current sources of the module and of what it inlines."""
    caches = [obj._cache for obj in namespace.values()
              if getattr(getattr(obj, "_cache", None), "_cache_path", None)
              and obj.__module__ == namespace["__name__"]]
    if not caches:
        return
    stamp = Path(caches[0]._cache_path) / (namespace["__name__"] + ".sources")
    digest = _sources_digest(namespace)
    try:
        if stamp.exists() and stamp.read_text() == digest:
            return
        for cache in caches:
            cache.flush()
        stamp.write_text(digest)
    except OSError:  # a read-only cache folder: numba then recompiles in memory anyway
        pass


def without_refcounting() -> dict:
    """numba's private `_nrt=False` option where this numba has it, for a kernel that allocates
    nothing (its caller allocates): without it every array a helper touches costs two atomic
    reference-count operations. A numba release without the option gives the same answers,
    only slower."""
    try:
        from numba.core.cpu import CPUTargetOptions
    except ImportError:
        return {}
    return {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}


# Programs up to this many instructions keep their scratch arrays between calls (~60 bytes per
# instruction, per thread); longer ones get fresh ones each call.
SCRATCH_MAX_N = 1 << 22


class Scratch(threading.local):
    """A kernel's work arrays, kept per thread from one call to the next: made by numba's
    allocator or freed at the top of glibc's heap, arrays of this size go back to the OS after
    each call and are faulted in again on the next (~4 KiB per fault, 2-5 us each on a VM).
    Only for arrays no result refers to."""

    def get(self, name: str, n: int, dtype, rows: int = 1) -> np.ndarray:
        """Array `name`, (rows, n) of dtype, contents left from the last call (uninitialised)."""
        if n > SCRATCH_MAX_N:
            return np.empty((rows, n), dtype)
        a = self.__dict__.get(name)
        if a is None or a.shape[1] < n or a.shape[0] != rows or a.dtype != dtype:
            a = np.empty((rows, max(n, 1024)), dtype)
            self.__dict__[name] = a
        return a[:, :n]
