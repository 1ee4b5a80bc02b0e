"""The persistent compile cache in TORCH_NEURONX_NEFF_CACHE_DIR (default /tmp/neff_cache).

An entry is what compiling a graph produced: its simulated cost (the stand-in for a NEFF) and
its simulated compile time. Keyed by the graph's code, input shapes/strides/dtypes, the
simulated target (instance, LNC), NEURON_CC_FLAGS and the cost model, so a second process
with the same graph hits. Writes go to a temporary file in the same directory and are
renamed into place (atomic on POSIX): two processes compiling the same graph at once both
write a complete entry and the last rename wins; a reader never sees half an entry. An
entry that cannot be read or does not validate is reported, ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile

from ..settings import get as _setting

logger = logging.getLogger("torch_neuronx.neuron_dynamo_backend")

# Bump when the entry layout or the cost model changes meaning: old entries stop matching.
FORMAT = "neuron-sim-graph/1"


def cache_dir() -> str:
    return _setting("TORCH_NEURONX_NEFF_CACHE_DIR")


def make_key(*parts: str) -> str:
    h = hashlib.sha256(FORMAT.encode())
    for p in parts:
        h.update(b"\0")
        h.update(p.encode())
    return h.hexdigest()


def _path(directory: str, key: str) -> str:
    return os.path.join(directory, f"{key}.neff.json")


def load(key: str, directory: str | None = None):
    """The entry's payload, or None on a miss. A corrupted entry counts as 'corrupted' + miss."""
    path = _path(directory or cache_dir(), key)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
            raise ValueError("format or key does not match")
        payload = data["payload"]
        if not isinstance(payload, dict):
            raise ValueError("payload is not an object")
        return payload
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:   # JSONDecodeError is a ValueError
        logger.warning("[NEFF_CACHE] ignoring unreadable entry %s (%s); recompiling.", path, e)
        raise CorruptedEntry(path) from e


class CorruptedEntry(Exception):
    pass


def store(key: str, payload: dict, directory: str | None = None) -> str | None:
    """Writes the entry atomically; returns its path (None if the directory is not writable)."""
    directory = directory or cache_dir()
    try:
        os.makedirs(directory, exist_ok=True)
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
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        logger.warning("[NEFF_CACHE] cannot write to %s (%s); continuing without caching.",
                       directory, e)
        return None
