"""Private @njit kernels (flat: arrays and scalars in and out). Each has a plain-Python
specification it is tested against (timing: neuron_sim/timing/reference.py).

The kernels are compiled once and cached on disk (cache=True). numba keys a cached function on
its own file only, but schedule.py inlines timing.py's helpers and timing.py inlines deps.py's:
after an edit to one file, another file's cached code would keep the old logic. Each module
therefore ends with `drop_stale_caches(globals())`, which empties its caches whenever any source
file of this package changed since they were written."""

from __future__ import annotations

import hashlib
from pathlib import Path


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def drop_stale_caches(namespace: dict) -> None:
    """Flush the on-disk cache of every cached dispatcher in `namespace` (a module's globals)
    unless it was written from the package's current sources."""
    caches = [obj._cache for obj in namespace.values()
              if getattr(getattr(obj, "_cache", None), "_cache_path", None)
              and obj.__module__ == namespace["__name__"]]
    if not caches:
        return
    stamp = Path(caches[0]._cache_path) / (namespace["__name__"] + ".sources")
    digest = _sources_digest()
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
