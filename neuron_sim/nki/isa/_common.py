"""Shared pieces of the instruction functions: the per-call context with its checks
(partitions and start rules, memories each engine reaches, free sizes) in NKI's words, reading
and writing the kernel's tensors, and operand helpers."""

from __future__ import annotations

import numpy as np

from ...isa.common import REACH, partition_starts
from ...program.ap import Memory
from ...program.builder import engine_of
from .. import dtypes
from ..errors import NkiPartitionError, NkiValidationError
from ..program import _MEM, _merge_dims
from ..tensor import NkiTensor
from ..tracer import current, user_loc

from .enums import engine

# ---- shared checks ---------------------------------------------------------------------------
class _Ctx:
    """Per-instruction context: the trace, the user's line and the instruction name."""

    __slots__ = ("trace", "loc", "op")

    def __init__(self, op, trace=None, loc=None):
        self.trace = current() if trace is None else trace
        self.loc = user_loc() if loc is None else loc
        self.op = op

    @property
    def chip(self):
        """The core's hardware data; generation differences are its capability flags."""
        return self.trace.target

    @property
    def numerics(self):
        return self.trace.numerics

    def fail(self, msg):
        raise NkiValidationError(msg, self.loc, f"nisa.{self.op}")

    def pattern_dims(self, t, operand):
        """An engine access pattern has at most chip.ap_free_dims_max free dimensions: count the
        view's free dimensions after merging the ones that are contiguous with each other."""
        merged = len(_merge_dims(t.shape[1:], t.strides[1:]))
        if merged > self.chip.ap_free_dims_max:
            self.fail(f"operand {operand!r} needs an access pattern with {merged} free dimensions "
                      f"(view shape {list(t.shape)}, strides {list(t.strides)}); the engines take at most "
                      f"{self.chip.ap_free_dims_max}: copy it to a contiguous tile first")

    def partitions(self, t, operand):
        if not t.on_chip:
            return
        n, p0 = t.num_partitions, t.partition_start
        if n > self.chip.sbuf_partitions or p0 + n > self.chip.sbuf_partitions:
            self.fail(f"operand {operand!r} spans partitions [{p0}, {p0 + n}); the core has "
                      f"{self.chip.sbuf_partitions} partitions (tile the partition dimension to "
                      f"<= {self.chip.sbuf_partitions})")
        parts = self.chip.sbuf_partitions
        allowed = partition_starts(n, self.chip)
        if p0 not in allowed:
            quadrant, half = self.chip.partition_quadrant_size, parts // 2
            span = f"more than {half}" if n > half else f"{quadrant + 1}-{half}" if n > quadrant \
                else f"1-{quadrant}"
            starts = " or ".join(filter(None, (", ".join(map(str, allowed[:-1])), str(allowed[-1]))))
            rule = f"{span} partitions must start at partition {starts}"
            raise NkiPartitionError(
                f"operand {operand!r} accesses {n} partitions starting at partition {p0}: {rule}. "
                f"Re-tile so the access starts on an allowed boundary", self.loc, f"nisa.{self.op}")

    def same_pf(self, a, b, an, bn):
        if a.num_partitions != b.num_partitions:
            self.fail(f"{an!r} has {a.num_partitions} partitions but {bn!r} has {b.num_partitions}; they must match")
        if a.free_size != b.free_size:
            self.fail(f"{an!r} has {a.free_size} elements per partition but {bn!r} has {b.free_size}; they must match")

    def engine(self, requested, default, allowed, operands=()):
        name = requested.value if isinstance(requested, engine) else (requested or "unknown")
        if name == "unknown":
            name = default
        if name not in allowed:
            self.fail(f"engine {name!r} cannot run this instruction; allowed: {', '.join(allowed)}")
        reach = REACH[engine_of(name)]
        for opname, t in operands:
            if isinstance(t, NkiTensor) and _MEM.get(t.buffer, Memory.HBM) not in reach:
                self.fail(f"the {name} engine cannot access {t.buffer.upper()} (operand {opname!r}, "
                          f"{t.storage.describe()}); "
                          + ("GpSimd has no PSUM port: use engine=nisa.vector_engine"
                             if name == "gpsimd" else "move the data through SBUF first"))
        return name

    # numerics
    def read(self, t, operand):
        """float32 (P, F) array of an operand; checks it was written."""
        self.trace.check_initialized(t, f"nisa.{self.op}", operand, self.loc)
        if not self.numerics:
            return None
        a = t.np()
        p = t.num_partitions if t.on_chip else 1
        return np.asarray(a, dtype=np.float32).reshape(p, -1)

    def read_raw(self, t, operand):
        self.trace.check_initialized(t, f"nisa.{self.op}", operand, self.loc)
        if not self.numerics:
            return None
        return np.ascontiguousarray(t.np()).reshape(t.num_partitions, -1)

    def write(self, t, values):
        """Round ``values`` to dst dtype and store them; mark the region written."""
        if self.numerics and values is not None:
            view = t.np()
            dt = dtypes.normalize(t.dtype)
            vals = np.asarray(values).reshape(view.shape)
            if isinstance(dt, dtypes._TFloat32):
                vals = dtypes.round_tf32(vals.astype(np.float32))
            elif view.dtype.kind in "iub" and np.asarray(values).dtype.kind == "f":
                info = np.iinfo(view.dtype) if view.dtype.kind != "b" else None
                vals = np.nan_to_num(np.rint(vals))
                if info is not None:
                    vals = np.clip(vals, info.min, info.max)
            view[...] = vals.astype(view.dtype, copy=False)
        t.mark_written()

    def emit(self, engine_name, reads, writes, **attrs):
        return self.trace.emit(self.op, engine_name, reads, writes, attrs, self.loc)


def _arg(v):
    """How a nisa call records an operand for its ISA module's `build`: a tensor view as it is,
    a number as a Python float (None stays None)."""
    return v if v is None or isinstance(v, NkiTensor) else float(v)
