"""The persistent compile cache in TORCH_NEURONX_NEFF_CACHE_DIR (default: per user,
$XDG_CACHE_HOME/torch_neuronx/neff or ~/.cache/torch_neuronx/neff, created 0700). An entry is a
graph's simulated cost (the stand-in for a NEFF); its key and what is trusted: README.md, "cache".

Writes go to a temporary file in the same directory and are renamed into place (atomic on
POSIX): two processes compiling the same graph at once both write a complete entry and the last
rename wins; a reader never sees half an entry. An entry that cannot be read or does not
validate is reported, ignored and rebuilt. Entries decide simulated times, so only a directory
no other user controls is trusted (`private_files.private_dir`), and entries are read without
following links, regular files of this user only, size-capped.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile

from ..private_files import private_dir, read_private, user_cache_dir
from ..settings import get as _setting

logger = logging.getLogger("torch_neuronx.neuron_dynamo_backend")

# Bump when the entry layout or the cost model changes meaning: old entries stop matching.
FORMAT = "neuron-sim-graph/1"

# An entry is a few kB (estimated op names dominate); anything far larger is not ours.
MAX_ENTRY_BYTES = 4 << 20


def cache_dir() -> str:
    """The configured directory (not yet checked; `usable_dir` checks it)."""
    return _setting("TORCH_NEURONX_NEFF_CACHE_DIR") or user_cache_dir("torch_neuronx", "neff")


def usable_dir() -> str | None:
    """The cache directory when it is private to this user (created if missing), else None."""
    return private_dir(cache_dir(), "compile cache (TORCH_NEURONX_NEFF_CACHE_DIR)")


def make_key(*parts: str) -> str:
    h = hashlib.sha256(FORMAT.encode())
    for p in parts:
        h.update(b"\0")
        h.update(p.encode())
    return h.hexdigest()


def _path(directory: str, key: str) -> str:
    return os.path.join(directory, f"{key}.neff.json")


def load(key: str):
    """The entry's payload, or None on a miss (or when the directory is not usable). A corrupted
    or unsafe entry counts as 'corrupted' + miss."""
    directory = usable_dir()
    if directory is None:
        return None
    path = _path(directory, key)
    try:
        raw = read_private(path, MAX_ENTRY_BYTES)
        if raw is None:
            return None
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
            raise ValueError("format or key does not match")
        payload = data["payload"]
        if not isinstance(payload, dict):
            raise ValueError("payload is not an object")
        return payload
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        # JSONDecodeError and UnicodeDecodeError are ValueErrors; UnsafeFile an OSError.
        logger.warning("[NEFF_CACHE] ignoring unreadable entry %s (%s); recompiling.", path, e)
        raise CorruptedEntry(path) from e


class CorruptedEntry(Exception):
    pass


def store(key: str, payload: dict) -> str | None:
    """Writes the entry atomically; returns its path (None if the directory is not writable)."""
    directory = usable_dir()
    if directory is None:
        return None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"format": FORMAT, "key": key, "payload": payload}, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            path = _path(directory, key)
            os.replace(tmp, path)
            return path
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        logger.warning("[NEFF_CACHE] cannot write to %s (%s); continuing without caching.",
                       directory, e)
        return None
