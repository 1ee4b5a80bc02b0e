"""Tracing state: the kernel being specialised, its storages and its instruction stream.

A kernel runs as ordinary Python (the NKI "specialisation" stage). Each ``nki.isa`` call checks
its operands, computes its numerics on NumPy (unless tracing for time only) and appends one
``Instr`` to the current ``KernelTrace``. After the kernel returns, ``memory.py`` assigns on-chip
addresses from liveness and ``program.py`` hands the stream to the simulator core.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..program.builder import paused_gc
from . import broadcast, dtypes, reuse
from .errors import NkiUninitializedReadError, NkiUninitializedReadWarning, NkiValidationError
from ..hardware import Chip
from .tensor import ON_CHIP, NkiTensor, Storage

_PKG_DIRS: tuple[str, ...] = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


# id(code object) -> (the code object, whether it is in _PKG_DIRS), asked per instruction: by
# id, as a code object's hash is not cached (it hashes its names and constants at every lookup)
_LIBRARY_CODE: dict = {}


def register_package_dir(path: str) -> None:
    """Frames in these directories are library frames, skipped when locating the user's line."""
    global _PKG_DIRS
    d = os.path.dirname(os.path.abspath(path)) + os.sep
    if d not in _PKG_DIRS:
        _PKG_DIRS = _PKG_DIRS + (d,)
        _LIBRARY_CODE.clear()


def user_loc() -> tuple[str, int] | None:
    """(file, line) of the innermost frame outside the NKI packages: the kernel's own line."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        hit = _LIBRARY_CODE.get(id(code))
        if hit is not None and hit[0] is code:      # (holding the code keeps its id)
            library = hit[1]
        else:
            fn = code.co_filename
            library = fn.startswith(_PKG_DIRS) or fn.startswith("<frozen")
            _LIBRARY_CODE[id(code)] = (code, library)
        if not library:
            return code.co_filename, f.f_lineno
        f = f.f_back
    return None


class Instr:
    """One ISA instruction of the traced program."""

    __slots__ = ("index", "op", "engine", "reads", "writes", "attrs", "loc")

    def __init__(self, index, op, engine, reads, writes, attrs, loc):
        self.index, self.op, self.engine = index, op, engine
        self.reads, self.writes = reads, writes    # the operand views (NkiTensor), in call order
        self.attrs, self.loc = attrs, loc

    def __repr__(self):
        where = f"{os.path.basename(self.loc[0])}:{self.loc[1]}" if self.loc else "?"
        names = lambda vs: [f"{v.storage.name}{list(v.shape)}" for v in vs]     # noqa: E731
        return (f"#{self.index} {self.engine}.{self.op} w={names(self.writes)} "
                f"r={names(self.reads)} @ {where}")


@dataclass
class Finding:
    """A non-fatal observation reported with the result (uninitialised reads, spills...)."""

    kind: str
    message: str
    loc: tuple[str, int] | None

    def __str__(self):
        where = f"{self.loc[0]}:{self.loc[1]}: " if self.loc else ""
        return f"{where}{self.kind}: {self.message}"


def track_use(s: Storage, idx: int, on_chip_used: list) -> None:
    """Instruction `idx` touches storage `s`: its first and last use, and for SBUF/PSUM the
    indices memory.py plans from (used_at) and the order of first touch (on_chip_used)."""
    if s.last_use != idx:
        s.last_use = idx
        if s.first_use is None:
            s.first_use = idx
            if s.on_chip:
                on_chip_used.append(s)
        if s.on_chip:
            s.used_at.append(idx)


@dataclass
class KernelTrace:
    target: Chip
    numerics: bool = True                  # False: shapes only, for timing of large kernels
    precise_fp: bool = True                # NKI_PRECISE_FP
    on_uninitialized: str = "error"        # "error" | "warn" | "ignore"
    program_id: tuple[int, ...] = (0,)
    barrier: object = None                 # Meetings shared by the programs of a launch
    meetings: int = 0                      # how many this program has been to
    shared: object = None                  # SharedHbm of the launch (LNC=2): one tensor per
                                           # allocation site
    n_shared: int = 0
    grid: tuple[int, ...] = (1,)
    kernel_name: str = "kernel"
    progress: object = None                # neuron_sim.progress.Progress of the launch (or None)
    storages: list = field(default_factory=list)
    instrs: list = field(default_factory=list)
    # the SBUF/PSUM storages in the order instructions first touch them, each with the indices
    # of the instructions that touch it (Storage.used_at): the liveness memory.py plans from
    on_chip_used: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    # engine-local state: ScalarE/VectorE accumulator registers (one float per lane), sized by
    # the target's partitions when the trace starts
    act_regs: np.ndarray = field(init=False)
    vec_regs: np.ndarray = field(init=False)
    loop: tuple = None                     # innermost nl.affine/sequential_range (language._Loop)
    reuse: object = None                   # what nki/reuse.py found repeated so far

    def __post_init__(self):
        lanes = self.target.sbuf_partitions
        self.act_regs = np.zeros(lanes, np.float32)
        self.vec_regs = np.zeros(lanes, np.float32)

    # ---- storages ---------------------------------------------------------------------------
    def new_storage(self, buffer, shape, dtype, name=None, role="internal", data=None, loc=None,
                    address=None) -> Storage:
        dtype = dtypes.normalize(dtype)
        shape = tuple([int(s) for s in shape])
        if buffer in ON_CHIP:
            if len(shape) < 2:
                shape = (shape[0] if shape else 1, 1)
            if shape[0] > self.target.sbuf_partitions:
                raise NkiValidationError(
                    f"{buffer} tensor {name or ''}{list(shape)}: partition dimension {shape[0]} "
                    f"exceeds the {self.target.sbuf_partitions} partitions; tile the first "
                    "dimension",
                    loc or user_loc(), "ndarray")
        if buffer == "shared_hbm" and role == "output" and self.shared is not None:
            k, self.n_shared = self.n_shared, self.n_shared + 1
            found = self.shared.lookup(k, shape, dtype)
            if found is not None:
                return found
        if self.numerics and data is None:
            sdt = dtypes.storage_dtype(dtype, self.precise_fp)
            # NKI fills new memory with sentinels: NaN for floats, 4 for integers [SimDoc].
            fill = np.nan if (sdt.kind == "f" or sdt in dtypes.LOW_PRECISION_FLOATS) else 4
            data = np.full(shape, fill, dtype=sdt)
        s = Storage(buffer, shape, dtype, name, loc or user_loc(), role, self, data, address)
        self.storages.append(s)
        if buffer == "shared_hbm" and role == "output" and self.shared is not None:
            s = self.shared.register(self.n_shared - 1, s)
        return s

    # ---- instructions ------------------------------------------------------------------------
    def emit(self, op: str, engine: str, reads, writes, attrs: dict, loc) -> Instr:
        """Record an instruction. ``reads``/``writes`` are tensors (views)."""
        # a partition-broadcast operand needs its own instruction first (broadcast.py)
        if engine in broadcast.CONSUMERS:
            reads, attrs = broadcast.lower(self, reads, attrs)
        return self.record(op, engine, tuple(reads), tuple(writes), attrs, loc)

    def record(self, op: str, engine: str, r: tuple, w: tuple, attrs: dict, loc) -> Instr:
        """`emit` for operands that are all tensors, none a partition broadcast on VectorE or
        ScalarE (TensorE's and the DMAs' never are): the instruction as it is."""
        idx = len(self.instrs)
        used = self.on_chip_used
        for a in r + w:
            track_use(a.storage, idx, used)
        for a in w:
            a.storage.write_count += 1
        ins = Instr(idx, op, engine, r, w, attrs, loc)
        self.instrs.append(ins)
        if op in reuse.PURE:
            reuse.note(self, ins)
        if self.progress is not None and not (idx + 1) & 1023:    # every 1024: one test per op
            self.progress.tick(1024)
        return ins

    def check_initialized(self, t: NkiTensor, op: str, operand: str, loc) -> None:
        if self.on_uninitialized == "ignore":
            return
        if t.fully_written():
            return
        mask = t.written_mask()
        missing = int(mask.size - np.count_nonzero(mask))
        if not missing:         # a view inside the blocks written so far of a partial storage
            return
        msg = (f"operand {operand!r} reads {missing} of {mask.size} elements of "
               f"{t.storage.describe()} that no instruction has written (the simulator filled them "
               f"with NaN). Write them first (nisa.memset / dma_copy), or shrink the read to the "
               f"written region")
        if self.on_uninitialized == "error":
            raise NkiUninitializedReadError(msg, loc, op)
        self.findings.append(Finding("uninitialized-read", f"{op}: {msg}", loc))
        where = f"{loc[0]}:{loc[1]}: {op}: " if loc else ""
        warnings.warn(NkiUninitializedReadWarning(where + msg), stacklevel=4)


class Meetings(threading.Barrier):
    """The barrier the programs of a launch meet at (nisa.core_barrier, nisa.sendrecv). The k-th
    meeting of each program waits for the k-th of the others, as the hardware pairs them by
    program order [ISA], and `meet` returns what each program brought to it. A program that
    returns ends the meetings (`end`): one that waits for it then, or later, would wait forever
    (on the hardware, a hang)."""

    def __init__(self, parties):
        super().__init__(parties)
        self.posts, self.ended, self.lock = {}, {}, threading.Lock()

    def meet(self, trace, what) -> dict | None:
        """Wait at `trace`'s next meeting; {program id: what it brought} once all are there, None
        if a program returned before it (self.ended: program id -> its meetings)."""
        k = trace.meetings
        trace.meetings = k + 1
        with self.lock:
            if self.ended:
                return None
            self.posts.setdefault(k, {})[trace.program_id] = what
        try:
            self.wait()
        except threading.BrokenBarrierError:
            if self.ended:
                return None
            raise                   # another program failed (launch._run_programs)
        return self.posts[k]

    def end(self, trace) -> None:
        """Program `trace` returned: release the programs waiting at a meeting it did not reach
        (each left its earlier meetings before it came to this one: aborting breaks no wait
        that could still succeed)."""
        with self.lock:
            self.ended[trace.program_id] = trace.meetings
            waiting = any(k >= trace.meetings for k in self.posts)
        if waiting:
            self.abort()


class SharedHbm:
    """The shared-HBM tensors of an LNC=2 launch: the k-th ``nl.ndarray(buffer=nl.shared_hbm)``
    of every program is one tensor, as the compiler allocates it once for both cores."""

    def __init__(self):
        self.lock = threading.Lock()
        self.allocs = {}

    def lookup(self, k, shape, dtype):
        with self.lock:
            s = self.allocs.get(k)
        if s is not None and (s.shape != tuple(shape) or s.dtype != dtype):
            raise NkiValidationError(
                f"shared_hbm allocation #{k} is {list(shape)} {dtypes.name_of(dtype)} in this "
                f"program but {list(s.shape)} {dtypes.name_of(s.dtype)} in another: SPMD programs "
                "must allocate shared tensors in the same order with the same shapes", user_loc(),
                "nl.ndarray")
        return s

    def register(self, k, s):
        with self.lock:
            return self.allocs.setdefault(k, s)


# The kernel being traced, per thread: the two programs of an LNC=2 launch trace in two threads
# (so nisa.core_barrier can hold one until the other arrives), as AWS's simulator runs them.
_LOCAL = threading.local()


def _stack() -> list:
    st = getattr(_LOCAL, "stack", None)
    if st is None:
        st = _LOCAL.stack = []
    return st


def active() -> bool:
    return bool(_stack())


def current() -> KernelTrace:
    stack = _stack()
    if not stack:
        raise NkiValidationError(
            "nki.language / nki.isa calls only work inside a kernel run by "
            "nki.simulate(kernel)(...) or an @nki.jit kernel call")
    return stack[-1]


@contextmanager
def tracing(trace: KernelTrace):
    """Makes ``trace`` the current kernel."""
    with paused_gc():       # tracing, as building, makes many objects and no garbage
        _stack().append(trace)
        try:
            yield trace
        finally:
            _stack().pop()
