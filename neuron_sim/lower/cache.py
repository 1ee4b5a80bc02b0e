"""ProgramCache: the one owner of lowering, estimation and the fusion fallback.

(op, shapes, strides, dtypes, scalars, chip, lnc) -> Timing, so a steady-state training step costs
dictionary lookups; a fused sequence is cached by its ops' keys and tensor identities. An op
with no rule, or whose rule fails, gets the roofline `estimate` (`Timing.estimated`, the reason
in `Timing.note` and `estimate_reasons`); a sequence that cannot be fused gets its ops' times
added in series (`Timing.note` says so). An op may be passed as a function making its OpSpec,
called only on a miss (the eager backend keys ops by its raw descriptors); `fallback(error)`
times an op whose OpSpec could not be made. Counts hits, misses and the wall time spent lowering."""

from __future__ import annotations

import time
from dataclasses import replace

from ..hardware import get_chip
from ..program.builder import paused_gc
from .api import Timing, lower_op, lower_sequence
from .estimate import estimate
from .registry import has_rule
from .spec import OpSpec


def in_series(timings, **fields) -> Timing:
    """`timings` run one after the other: their times, engines' busy times, HBM bytes, FLOPs
    and instructions added; `fields`: the other fields of the Timing."""
    engine_ns = {}
    for t in timings:
        for engine, v in t.engine_ns.items():
            engine_ns[engine] = engine_ns.get(engine, 0.0) + v
    return Timing(sum(t.total_ns for t in timings), engine_ns, sum(t.hbm_bytes for t in timings),
                  sum(t.flops for t in timings), sum(t.instructions for t in timings), **fields)


def _seq_key(op: OpSpec) -> tuple:
    """An op's key inside a sequence: its layout key and its tensors' identities (dataflow)."""
    return op.key() + (tuple(t.id for t in op.inputs), tuple(t.id for t in op.outputs))


class ProgramCache:
    def __init__(self):
        self._ops: dict = {}
        self._specs: dict = {}      # (OpSpec.key, name, ids, chip, lnc) -> Timing (see _lower)
        self._seqs: dict = {}
        self.hits = 0
        self.misses = 0
        self.lower_s = 0.0
        self.lower_cpu_s = 0.0      # CPU of the lowering thread in misses (load-independent)
        self.estimate_reasons: dict = {}     # op name -> why it was estimated

    def _cached(self, table: dict, k, make) -> Timing:
        """table[k], made by make() on a miss (counted, its wall time added to lower_s and the
        CPU time of this thread to lower_cpu_s: on a loaded machine the wall time is mostly
        waiting for a core).
        A miss builds and simulates programs with the garbage collector paused (see paused_gc):
        in a process holding a model's many objects, the collections that lowering's short-lived
        objects set off cost about a quarter of a cold step's lowering, numba's first load
        included."""
        t = table.get(k)
        if t is not None:
            self.hits += 1
            return t
        self.misses += 1
        t0, c0 = time.perf_counter(), time.thread_time()
        with paused_gc():
            t = table[k] = make()
        self.lower_s += time.perf_counter() - t0
        self.lower_cpu_s += time.thread_time() - c0
        return t

    def lower_op(self, op, chip=None, lnc: int = 1, key=None, fallback=None) -> Timing:
        """Timing of `op` (an OpSpec, or a function making one: then `key` is required)."""
        c = get_chip(chip)

        def make():
            try:
                return self._lower(op() if callable(op) else op, c, lnc)
            except Exception as e:  # noqa: BLE001 - timing must never break the user's program
                if fallback is None:
                    raise
                t = fallback(e)
                self.estimate_reasons.setdefault(t.ops[0] if t.ops else "<op>",
                                                 f"{type(e).__name__}: {e}")
                return t
        return self._cached(self._ops, (key if key is not None else op.key(), c.name, lnc), make)

    def _lower(self, op: OpSpec, c, lnc) -> Timing:
        """One lowering per distinct OpSpec: callers keying ops their own way (the eager backend
        by raw descriptors) can reach the same OpSpec under two keys; the program is the same."""
        k = (op.key(), op.name, tuple(t.id for t in op.inputs), tuple(t.id for t in op.outputs),
             c.name, lnc)
        try:
            t = self._specs.get(k)
        except TypeError:           # an unhashable argument: lowered without sharing
            return self._lower_new(op, c, lnc)
        if t is None:
            t = self._specs[k] = self._lower_new(op, c, lnc)
        return t

    def _lower_new(self, op: OpSpec, c, lnc) -> Timing:
        reason = "no lowering rule"
        if has_rule(op.name):
            try:
                return lower_op(op, c, lnc)
            except Exception as e:  # noqa: BLE001 - any rule failure degrades to the estimate
                reason = f"{type(e).__name__}: {e}"
        self.estimate_reasons.setdefault(op.name, reason)
        return replace(estimate(op, c, lnc), note=f"roofline estimate ({reason})")

    def lower_sequence(self, ops, chip=None, lnc: int = 1, keys=None, standalone=None,
                       live_outputs=None) -> Timing:
        """ONE program of `ops` (a list of OpSpecs, or a function making it: then `keys` and
        `standalone` are required); `standalone`: their Timings alone when known."""
        c = get_chip(chip)
        keys = tuple(keys) if keys is not None else tuple(_seq_key(o) for o in ops)
        k = ("seq", keys, c.name, lnc, None if live_outputs is None else frozenset(live_outputs))

        def make():
            seq = None
            try:
                seq = ops() if callable(ops) else ops
                return lower_sequence(seq, c, lnc, standalone=standalone,
                                      live_outputs=live_outputs)
            except Exception as e:  # noqa: BLE001 - an unfusable group runs op by op
                return self._in_series(e, seq, c, lnc, standalone)
        return self._cached(self._seqs, k, make)

    def _in_series(self, e, ops, c, lnc, standalone) -> Timing:
        """The fallback of a sequence that cannot be fused: its ops' Timings added."""
        self.estimate_reasons.setdefault("<fusion>", f"{type(e).__name__}: {e}")
        alone = standalone if standalone is not None else [self.lower_op(o, c, lnc) for o in ops]
        return in_series(alone, ops=tuple(a.ops[0] if a.ops else "" for a in alone),
                         per_op_ns=tuple(a.total_ns for a in alone),
                         note=f"fusion failed ({type(e).__name__}: {e}); ops timed one by one")

    def stats(self) -> dict:
        n = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses,
                "hit_rate": self.hits / n if n else 0.0, "lower_s": self.lower_s,
                "lower_cpu_s": self.lower_cpu_s,
                "programs": len(self._ops), "fused_programs": len(self._seqs),
                "estimated_kinds": len(self.estimate_reasons)}
