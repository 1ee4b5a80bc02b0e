"""Files this process keeps for itself (the compile cache, debug artifacts) in directories that
another local user must not control.

A directory is used only when it and every directory above it are owned by this user (or root)
and none is writable by others unless sticky (as /tmp is): otherwise another user could plant,
swap or read entries. Reads open with O_NOFOLLOW and O_NONBLOCK (a planted symlink fails, a FIFO
cannot block), accept regular files of this user only and stop at a size cap. New files are
created exclusively (O_EXCL | O_NOFOLLOW, mode 0600): an existing name or link is never written
through.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile

logger = logging.getLogger("torch_neuronx")

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_warned: set = set()


class UnsafeFile(OSError):
    """An entry that is not a regular file of this user, or is too big."""


def user_cache_dir(*parts: str) -> str:
    """$XDG_CACHE_HOME/... (when it is an absolute path, as the XDG spec requires), else
    ~/.cache/..."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, *parts)


def user_temp_dir(name: str) -> str:
    """`name`-<uid> in the temporary directory: one per user."""
    return os.path.join(tempfile.gettempdir(), f"{name}-{os.getuid()}")


def _problem(st: os.stat_result, leaf: bool) -> str | None:
    me = os.getuid()
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in (me, 0) or (leaf and st.st_uid != me):
        return f"is owned by uid {st.st_uid}, not by this user (uid {me})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (not leaf and st.st_mode & stat.S_ISVTX):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def private_dir(path: str, what: str) -> str | None:
    """Creates `path` (mode 0700) if missing and returns it when it is safe to use; otherwise warns
    once, naming the directory, the problem and the fix, and returns None (run without it)."""
    path = os.path.abspath(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        problem = _problem(os.stat(path), leaf=True)
        parent = os.path.dirname(path)
        while problem is None and parent != os.path.dirname(parent):
            why = _problem(os.stat(parent), leaf=False)
            if why:
                problem = f"is inside {parent}, which {why}"
            parent = os.path.dirname(parent)
    except OSError as e:
        problem = f"cannot be created or read ({e.strerror or e})"
    if problem is None:
        return path
    if path not in _warned:
        _warned.add(path)
        logger.warning("%s: %s %s; continuing without it. Use a directory only you can write "
                       "(chmod 700) or unset the variable for the per-user default.",
                       what, path, problem)
    return None


def read_private(path: str, max_bytes: int) -> bytes | None:
    """The bytes of the regular file `path` (None when it does not exist); raises UnsafeFile for a
    symlink, FIFO, device, another user's file or one larger than `max_bytes`."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UnsafeFile(f"{path}: cannot open without following links ({e.strerror})") from e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path} is not a regular file")
        if st.st_uid != os.getuid():
            raise UnsafeFile(f"{path} is owned by uid {st.st_uid}, not by this user")
        if st.st_size > max_bytes:
            raise UnsafeFile(f"{path} has {st.st_size} bytes; entries are at most {max_bytes}")
        data = f.read(max_bytes + 1)      # reads until EOF or one byte past the cap
    if len(data) > max_bytes:
        raise UnsafeFile(f"{path} grew past {max_bytes} bytes while being read")
    return data


def create_private(path: str, text: str) -> None:
    """Writes `text` to the new file `path` (mode 0600); raises FileExistsError when the name
    exists, whatever it is (file, link, FIFO)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
