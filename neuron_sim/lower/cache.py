"""ProgramCache: (op, shapes, strides, dtypes, scalars, chip, lnc) -> Timing, so a steady-state
training step costs dictionary lookups. Fused sequences are cached by the tuple of their ops'
keys. Counts hits, misses, the wall time spent lowering, and which ops were estimated."""

from __future__ import annotations

import time
from collections import Counter

from .api import Timing, _chip, lower_op, lower_sequence
from .estimate import estimate
from .registry import has_rule
from .spec import OpSpec


class ProgramCache:
    def __init__(self):
        self._ops: dict = {}
        self._seqs: dict = {}
        self.hits = 0
        self.misses = 0
        self.lower_s = 0.0
        self.estimate_reasons: dict = {}     # op name -> why it was estimated

    def clear(self):
        self.__init__()

    def lower_op(self, op: OpSpec, chip=None, lnc: int = 1, key=None) -> Timing:
        c = _chip(chip)
        k = (key if key is not None else op.key(), c.name, lnc)
        t = self._ops.get(k)
        if t is not None:
            self.hits += 1
            return t
        self.misses += 1
        t0 = time.perf_counter()
        if has_rule(op.name):
            try:
                t = lower_op(op, c, lnc)
            except Exception as e:  # noqa: BLE001 - any rule failure degrades to the estimate
                self.estimate_reasons.setdefault(op.name, f"{type(e).__name__}: {e}")
                t = estimate(op, c, lnc)
        else:
            self.estimate_reasons.setdefault(op.name, "no lowering rule")
            t = estimate(op, c, lnc)
        self.lower_s += time.perf_counter() - t0
        self._ops[k] = t
        return t

    def lower_sequence(self, ops, chip=None, lnc: int = 1, keys=None, standalone=None,
                       live_outputs=None) -> Timing:
        c = _chip(chip)
        keys = tuple(keys) if keys is not None else tuple(o.key() for o in ops)
        k = ("seq", keys, c.name, lnc, None if live_outputs is None else frozenset(live_outputs))
        t = self._seqs.get(k)
        if t is not None:
            self.hits += 1
            return t
        self.misses += 1
        t0 = time.perf_counter()
        try:
            t = lower_sequence(ops, c, lnc, standalone=standalone, live_outputs=live_outputs)
        except Exception as e:  # noqa: BLE001 - an unfusable group runs op by op
            self.estimate_reasons.setdefault("<fusion>", f"{type(e).__name__}: {e}")
            alone = standalone or [self.lower_op(o, c, lnc) for o in ops]
            t = Timing(sum(a.total_ns for a in alone), {}, sum(a.hbm_bytes for a in alone),
                       sum(a.flops for a in alone), sum(a.instructions for a in alone),
                       ops=tuple(o.name for o in ops), per_op_ns=tuple(a.total_ns for a in alone),
                       note="fusion failed; ops timed one by one")
        self.lower_s += time.perf_counter() - t0
        self._seqs[k] = t
        return t

    def stats(self) -> dict:
        n = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses,
                "hit_rate": self.hits / n if n else 0.0, "lower_s": self.lower_s,
                "programs": len(self._ops), "fused_programs": len(self._seqs),
                "estimated_kinds": len(self.estimate_reasons)}
