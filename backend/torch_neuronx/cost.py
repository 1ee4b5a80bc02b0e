"""Simulated time of eager ops: the cost function the C++ queue calls when it drains.

Each queued op is lowered to a NeuronCore ISA program (neuron_sim.lower), simulated once per
(op, shapes, strides, dtypes, scalars, chip, LNC) and cached, so a steady-state training step costs
dictionary lookups. Eager execution pays a launch cost per program (the chip's eager_launch_s).

Adaptive Eager Execution (AEE): consecutive fusible ops of one stream between sync points are
lowered into ONE program (intermediates that a later op reads stay in SBUF) and pay one launch.
Numerics are unchanged (the CPU kernels compute every op); only the timing changes. A drain with
at_sync=True is a boundary (print, .item(), synchronize, events); a drain forced by the queue
length bound closes the open group too (a small, documented difference). AEE is off under
`torch.use_deterministic_algorithms(True)`, with TORCH_NEURONX_ENABLE_CONCATENATION=0, or after
`torch_neuronx.set_adaptive_eager(False)`.

An op with no lowering rule is timed by a documented roofline (neuron_sim.lower.estimate) and
counted in `estimated`, which `torch_neuronx.estimated_ops()` reports. Host<->device copies are
timed as PCIe transfers (the chip's host_link_bytes_per_s).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import threading
import time
from collections import Counter, defaultdict
from typing import NamedTuple

import torch

from neuron_sim.lower import (AEE_MAX_OPS, ENGINES, OpSpec, ProgramCache, TensorSpec, Timing,
                              estimate_bytes, warm_up)
from neuron_sim.program.builder import paused_gc
from neuron_sim.progress import Progress

from . import _C, settings
from .profiling.hook import on_drain as _profiling_hook

HOST_COPIES = ("neuron::copy_h2d", "neuron::copy_d2h")

# The queue hands a drain over as a `_C.OpBatch` (backend/csrc/python/OpBatch.cpp): `columns()`
# gives every op's key, preset_ns, device and stream as lists; `batch[i]` is a `_C.QueuedOp`
# (seq, name, device, stream, args, outputs, preset_ns, key) whose tensors are `_C.TensorDesc`
# (sizes, strides, dtype, on_neuron, storage, offset: `storage` identifies the allocation while
# it is alive, 0 for none; `offset` is in elements). `key` is the op's layout key, interned in
# C++ when the op was queued (runtime/OpKeys.h): a drain reads an op's fields only the first
# time its key is seen.
TensorDesc, QueuedOp, OpBatch = _C.TensorDesc, _C.QueuedOp, _C.OpBatch


def tensor_desc(sizes, strides, dtype, storage, offset=0, on_neuron=True) -> TensorDesc:
    """A TensorDesc made in Python by field name (the profiling advice's rewritten steps)."""
    return TensorDesc((sizes, strides, dtype, on_neuron, storage, offset))


def queued_op(name, device, stream, args, outputs, preset_ns=-1, seq=-1) -> QueuedOp:
    """A QueuedOp made in Python by field name; an OpBatch made of it computes its key."""
    return QueuedOp((seq, name, device, stream, args, outputs, preset_ns))


def place_of(t):
    """Where a device tensor's data is: (storage, offset, sizes, strides, dtype); None for a CPU
    scalar or a tensor without storage."""
    return (t.storage, t.offset, t.sizes, t.strides, t.dtype) if t.on_neuron and t.storage \
        else None


def extent(t) -> tuple:
    """[first, end) elements of its storage a described tensor covers."""
    sizes, strides, offset = t.sizes, t.strides, t.offset
    if any(n == 0 for n in sizes):
        return offset, offset
    return offset, offset + 1 + sum((n - 1) * abs(st) for n, st in zip(sizes, strides))


class Writes:
    """The places (storage, offset, layout) a run of ops wrote, by storage, with the [first, end)
    elements each covers."""

    def __init__(self):
        self.by_storage = {}

    def overwrite(self, t, place) -> list:
        """Records a write of `t` at `place`; returns the other places of its storage it
        overlaps, which it ends: a freed output's address, reused for a tensor of another
        layout, must not pass for that output."""
        lo, hi = extent(t)
        keep, ended = [], []
        for (l2, h2), p2 in self.by_storage.get(t.storage, ()):
            (ended if p2 != place and l2 < hi and lo < h2 else keep).append(((l2, h2), p2))
        self.by_storage[t.storage] = keep + [((lo, hi), place)]
        return [p2 for _e, p2 in ended]

    def overlapping(self, t) -> list:
        """The written places of `t`'s storage whose elements `t` overlaps."""
        lo, hi = extent(t)
        return [p2 for (l2, h2), p2 in self.by_storage.get(t.storage, ()) if l2 < hi and lo < h2]


_SPECS: dict = {}       # (sizes, strides, dtype, on_neuron) -> TensorSpec without an id


def _spec(t, ids=None):
    """The TensorSpec of a described tensor: made once per layout (a cold step's drains describe
    a few hundred layouts ~10k times), then given the next id of `ids`."""
    if t.dtype is None:
        return None
    k = (t.sizes, t.strides, t.dtype, t.on_neuron)
    s = _SPECS.get(k)
    if s is None:
        if len(_SPECS) > 4096:
            _SPECS.clear()
        s = _SPECS[k] = TensorSpec(t.sizes, t.dtype, t.strides, on_device=t.on_neuron)
    return s if ids is None else s.with_id(next(ids))


def _arg(a, ids=None):
    if type(a) is TensorDesc:
        return _spec(a, ids)
    if type(a) is list:
        return [_spec(t, ids) for t in a if t.dtype is not None]
    return a


def op_spec(op, *, ids=None) -> OpSpec:
    """The torch-free description of one queued op. `ids`: an iterator giving its TensorSpecs,
    in `described` order, their identities inside a fused sequence (default: none; layouts are
    matched)."""
    # inputs first: an in-place op reads the value before its write
    ins = tuple(_arg(a, ids) for a in op.args)
    outs = tuple(o for o in (_spec(t, ids) for t in op.outputs) if o is not None)
    return OpSpec(op.name, ins, outs)


def on_device(t: torch.Tensor) -> bool:
    """False for a 0-dim CPU tensor: a device op reads it as a scalar (TensorDesc.on_neuron)."""
    return t.device.type != "cpu" or t.dim() > 0


def tensor_spec(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(t.shape, t.dtype, t.stride(), on_device=on_device(t))


def torch_arg(a, leaf=torch.Tensor, describe=tensor_spec):
    """An op's argument given by torch (check_semantics, the compile backend's FX graphs) as
    the eager queue describes it: `describe(a)` of a `leaf` (a tensor: its TensorSpec), tensor
    lists as lists without their Nones, as _arg gives them (x[:, i]'s index [None, i]), int
    lists as tuples (rules read dims as a tuple: a list would mean every dim), a dtype, device,
    layout or memory format by its name."""
    if isinstance(a, leaf):
        return describe(a)
    if isinstance(a, (list, tuple)):
        items = [torch_arg(x, leaf, describe) for x in a]
        if any(isinstance(x, TensorSpec) for x in items):
            return [x for x in items if x is not None]
        return tuple(items)
    if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(a).replace("torch.", "")
    return a


def described(op):
    """(tensor, is_output) of an op's described tensors, in the order op_spec builds them."""
    for a in op.args:
        if type(a) is TensorDesc:
            if a.dtype is not None:
                yield a, False
        elif type(a) is list:
            yield from ((t, False) for t in a if t.dtype is not None)
    yield from ((t, True) for t in op.outputs if t.dtype is not None)


def identity_pattern(group) -> tuple:
    """The dataflow of a fused group of QueuedOps from the device's storages: one id per
    described tensor, in op_spec's order. An input is the latest earlier output of the group at
    the same place (storage, offset, layout): every write to device memory inside a group is one
    of its ops, so that is the dataflow, whatever the allocator reused. Any other input is its
    own outside tensor: two such reads sharing a place may be one tensor or a freed one's
    successor, so they are not merged. Ids are positions, so the same dataflow gives the same
    pattern (and keys the same fused program) every step. The readable reference of the C++
    `OpBatch.pattern` the drain uses (runtime/OpKeys.cpp); `pattern_ids` maps that one to these
    ids."""
    latest, pattern, written = {}, [], Writes()
    for i, op in enumerate(group):
        for k, (t, is_out) in enumerate(described(op), 1):
            place = place_of(t)
            if is_out:
                tid = ("o", i, k)
                if place is not None:
                    for p2 in written.overwrite(t, place):
                        latest.pop(p2, None)
                    latest[place] = tid
            else:
                tid = latest.get(place, ("x", i, k)) if place is not None else ("x", i, k)
            pattern.append(tid)
    return tuple(pattern)


def pattern_ids(group, positions) -> tuple:
    """`identity_pattern`'s ids from the C++ pattern (per described tensor, the position of the
    tensor whose value it is)."""
    own = [("o" if is_out else "x", i, k) for i, op in enumerate(group)
           for k, (_t, is_out) in enumerate(described(op), 1)]
    return tuple(own[p] for p in positions)


def fused_specs(group, pattern=None):
    """OpSpecs of a fused group whose TensorSpecs carry the ids of `identity_pattern`."""
    ids = iter(pattern if pattern is not None else identity_pattern(group))
    return [op_spec(op, ids=ids) for op in group]


def _tagged(spec: OpSpec, ids) -> OpSpec:
    """An id-less `op_spec` with its TensorSpecs given the next ids of `ids`, in op_spec's order
    (what op_spec(op, ids=...) gives for an op of the same key, without reading the op again)."""
    def tag(a):
        if type(a) is TensorSpec:
            return a.with_id(next(ids))
        if type(a) is list:             # a tensor list (op_spec makes no other lists)
            return [t.with_id(next(ids)) for t in a]
        return a
    return OpSpec(spec.name, tuple([tag(a) for a in spec.args]),
                  tuple([t.with_id(next(ids)) for t in spec.outputs]))


def _described_count(spec: OpSpec) -> int:
    """How many described tensors an op of this id-less `op_spec` has (inputs, then outputs)."""
    return sum(1 if type(a) is TensorSpec else len(a) if type(a) is list else 0
               for a in spec.args)


def _group_specs(batch, group, costs) -> list:
    """`fused_specs(ops, pattern_ids(ops, batch.pattern(group)))` of the ops at `group`, whose
    `_Seen` are `costs`: each op's id-less op_spec is made once per key (equal keys describe
    equal ops; float scalars, which keys leave out, never change a program) and tagged with the
    group's ids, so an op of a known key is not read from its descriptors again."""
    own = []                    # pattern_ids' ids: per op, its inputs ("x") then outputs ("o")
    for i, (j, c) in enumerate(zip(group, costs)):
        if c.spec is None:
            c.spec = op_spec(batch[j])
            c.n_in = _described_count(c.spec)
        n_in = c.n_in
        own += [("x", i, k) for k in range(1, n_in + 1)]
        own += [("o", i, k) for k in range(n_in + 1, n_in + 1 + len(c.spec.outputs))]
    ids = iter([own[p] for p in batch.pattern(group)])
    return [_tagged(c.spec, ids) for c in costs]


def _nbytes(t) -> int:
    return math.prod(t.sizes) * min(t.dtype.itemsize, 4) if t.dtype is not None else 0


def _moved_bytes(op, outputs=True) -> int:
    """Bytes of an op's tensor arguments (and outputs) as the roofline counts them."""
    moved = sum(_nbytes(t) for t in op.args if type(t) is TensorDesc)
    return moved + sum(_nbytes(t) for t in op.outputs) if outputs else moved


class Charge(NamedTuple):
    """What a drain decided for one op, for the profiler to read (made only while profiling):
    the ns charged and how (`kind`: "program" for a lowered or estimated op, "view", "host" for
    a PCIe copy, "preset" for a known duration); a program's cache key, Timing, the launch time
    it carries (its share of its fused group's launch) and its fused group (the batch index of
    the group's first op; -1 when launched alone); the bytes a host copy moves."""
    ns: int
    kind: str
    key: int = -1
    timing: Timing | None = None
    launch_ns: float = 0.0
    group: int = -1
    host_bytes: int = 0


class _GcPause(contextlib.ExitStack):
    """The garbage collector paused from a drain's first program-cache miss (`hold`) to the end
    of the drain, not only during each miss (lower/cache.py): the collection that the misses'
    allocations set off then runs once, after the drain, instead of as each miss ends, where a
    full collection (~100-200 ms in a process holding a model, one every few steps) fell inside
    the cold lowering of the step it came in. A drain without a miss (steady state) never
    touches the collector."""
    held = False

    def hold(self):
        if not self.held:
            self.held = True
            self.enter_context(paused_gc())


_PROGRAM, _ESTIMATED, _VIEW, _HOST = range(4)     # how a drain charges an op (_Seen.kind)


class _Seen:
    """What a drain keeps of an op key it has seen, so a later op of the key reads nothing else:
    the op's name, its Timing (None for a host copy), how it is charged (`kind`), its ns when
    charged alone (launch + program, or a host copy's PCIe transfer) and whether it counts in
    `executed`."""
    __slots__ = ("name", "timing", "kind", "ns", "aten", "engines", "busy", "hbm_bytes", "spec",
                 "n_in", "host_bytes")

    def __init__(self, name, timing, kind, ns):
        self.name, self.timing, self.kind, self.ns = name, timing, kind, ns
        self.spec = None         # its id-less op_spec, once a fused group needs it (_group_specs)
        self.n_in = 0            # how many of the spec's described tensors are inputs
        self.host_bytes = 0      # a host copy: the bytes it moves over PCIe
        self.aten = kind != _HOST and not name.startswith("neuron::")
        # for the statistics: every engine of the Timing, and those that add something
        self.engines = tuple(timing.engine_ns.items()) if timing is not None else ()
        self.busy = tuple((e, v) for e, v in self.engines if v)
        self.hbm_bytes = timing.hbm_bytes if timing is not None else 0.0


class _OpStats:
    __slots__ = ("count", "ns", "engine_ns", "hbm_bytes", "estimated", "fused", "seen")

    def __init__(self):
        self.count, self.ns, self.hbm_bytes, self.estimated, self.fused = 0, 0, 0.0, 0, 0
        self.engine_ns = defaultdict(float)
        self.seen = set()        # the _Seen recorded here: their engines are in engine_ns


_TABLE_ENGINES = ("TensorE", "VectorE", "ScalarE", "GpSimd", "DMA")   # report()'s columns


class LoweredCostModel:
    """Per-op simulated nanoseconds from lowered, cached ISA programs of the visible instance."""

    def __init__(self, visible):
        self.instance = visible.instance
        self.lnc = visible.lnc
        self.chip = self.instance.chip
        self.launch_ns = 1e9 * self.chip.eager_launch_s
        self.cache = ProgramCache()  # keyed by raw descriptors: owns lowering and fallbacks
        self.estimated = Counter()   # op name -> count timed by roofline
        self.executed = set()        # op names that ran as Neuron ops
        self.aee_override = None     # set_adaptive_eager(); None: follow env + determinism
        self._seen = {}              # op key (C++, runtime/OpKeys.h) -> _Seen
        self._fused = {}             # fused group key (OpBatch.group_key) -> its ns per op
        self._lowering = Progress("lowering programs", unit=" programs")   # cold models: seconds
        self._warm_up = None         # the warm-up thread, once started (warm_up_in_background)
        self.reset_stats()

    def warm_up_in_background(self) -> None:
        """Once, from the device's first use: lower one tiny op in a daemon thread
        (neuron_sim.lower.warm_up), so numba's one-off load of its kernels (~250 ms of CPU)
        runs while the process is still in PyTorch's own code, which mostly releases the GIL
        (building the model, the first forward's CPU kernels), instead of inside the first
        drain. It only moves that work: the CPU time is the same. Any failure is left to the
        first real lowering, which would meet it anyway."""
        if self._warm_up is not None:
            return

        def run():
            try:
                with paused_gc():       # as a program-cache miss (lower/cache.py)
                    warm_up(self.chip)
            except Exception:           # noqa: BLE001 - never disturb the user's program
                pass
        self._warm_up = threading.Thread(target=run, name="neuron-sim-warm-up", daemon=True)
        self._warm_up.start()
        # a fork (a DataLoader worker) while the thread imports or loads kernels would copy its
        # held locks into the child: the fork waits for the warm-up instead
        os.register_at_fork(before=self._warm_up.join)

    # ---- statistics ---------------------------------------------------------------------------
    def reset_stats(self):
        self.ops = defaultdict(_OpStats)
        self.launches = 0
        self.launch_total_ns = 0
        self.fused_groups = 0
        self.fused_ops = 0
        self.total_ns = 0
        self.cost_s = 0.0

    def aee_enabled(self) -> bool:
        if torch.are_deterministic_algorithms_enabled():
            return False
        if self.aee_override is not None:
            return self.aee_override
        return bool(settings.get("TORCH_NEURONX_ENABLE_CONCATENATION"))

    # ---- timing of one op ---------------------------------------------------------------------
    def _first_seen(self, op) -> "_Seen":
        """What every later op of this key needs: read from the op's fields this once (its
        Timing from the program cache, lowered on a miss)."""
        if op.name in HOST_COPIES:     # a PCIe transfer, no program
            moved = _moved_bytes(op, outputs=False)
            seen = _Seen(op.name, None, _HOST,
                         int(round(1e9 * moved / self.chip.host_link_bytes_per_s
                                   + 1e9 * self.chip.dma_fixed_latency_s)))
            seen.host_bytes = moved
            return seen

        def make():                 # only on a cache miss
            self._lowering.tick(note=op.name)
            return op_spec(op)

        def bytes_only(_error):     # the descriptors could not be described as an OpSpec
            return estimate_bytes(op.name, float(_moved_bytes(op)), self.chip, self.lnc)
        t = self.cache.lower_op(make, self.chip, self.lnc, key=op.key, fallback=bytes_only)
        kind = _ESTIMATED if t.estimated else _VIEW if t.total_ns <= 0 else _PROGRAM
        return _Seen(op.name, t, kind, int(round(self.launch_ns + t.total_ns)))

    def _record(self, c, ns, fused=False):
        """Adds one op of `c`'s key, charged `ns`, to the statistics."""
        s = self.ops[c.name]
        s.count += 1
        s.ns += ns
        if c.timing is not None:
            engine_ns = s.engine_ns
            if c in s.seen:          # adding 0.0 changes no sum: only busy engines are added
                for e, v in c.busy:
                    engine_ns[e] += v
            else:                    # the first time, every engine, so each is listed
                s.seen.add(c)
                for e, v in c.engines:
                    engine_ns[e] += v
            s.hbm_bytes += c.hbm_bytes
            if c.kind == _ESTIMATED:
                s.estimated += 1
        if fused:
            s.fused += 1
        self.total_ns += ns

    def __call__(self, batch, at_sync):
        t0 = time.perf_counter()
        profiling = _C._activity_logging()
        out, charges = self._charge(batch, profiling)
        self.cost_s += time.perf_counter() - t0
        _profiling_hook(self, batch, charges)   # engine lanes while torch.profiler records
        return out

    def price(self, batch) -> list:
        """Simulated ns of each op of `batch` (an OpBatch or a list of QueuedOps) exactly as a
        drain would charge them (same AEE groups, same cached programs), without counting them
        in the statistics: how the profiling advice re-times a changed step."""
        model = copy.copy(self)         # the same caches, statistics of its own
        model.reset_stats()
        model.estimated, model.executed = Counter(), set()
        hits = self.cache.hits
        try:
            return model._charge(batch)[0]
        finally:
            self.cache.hits = hits

    def _charge(self, batch, profiling=False) -> tuple:
        """(simulated ns per op, a Charge per op while profiling, else None). A repeated op
        costs a lookup of its key: its fields are read only the first time."""
        with _GcPause() as gc_pause:
            return self._charge_batch(batch, profiling, gc_pause)

    def _charge_batch(self, batch, profiling, gc_pause) -> tuple:
        if type(batch) is not OpBatch:
            batch = OpBatch(batch)
        keys, presets, devices, streams = batch.columns()
        out = [0] * len(keys)
        charges = [None] * len(keys) if profiling else None
        aee = self.aee_enabled()
        seen, executed, hits = self._seen, self.executed, 0
        group, costs = [], []       # the open fused group: batch indices, their _Seen
        gdevice = gstream = None

        def close_group():          # charge the open group as one program; a new one opens
            self._charge_group(batch, keys, group, costs, out, charges, gc_pause)
            group.clear()
            costs.clear()

        for i, key in enumerate(keys):
            if presets[i] >= 0:           # duration known (compiled graph, collective, kernel)
                if group:
                    close_group()
                out[i] = presets[i]
                if charges is not None:
                    charges[i] = Charge(presets[i], "preset")
                continue
            c = seen.get(key)
            if c is None:
                gc_pause.hold()
                c = seen[key] = self._first_seen(batch[i])
            elif c.kind != _HOST:
                hits += 1                 # what the program cache would have counted
            kind = c.kind
            if kind == _HOST:
                if group:
                    close_group()
                out[i] = c.ns
                if charges is not None:
                    charges[i] = Charge(c.ns, "host", host_bytes=c.host_bytes)
                self._record(c, c.ns)
                continue
            if c.aten:
                executed.add(c.name)
            if kind == _VIEW:             # no program, no launch
                if charges is not None:
                    charges[i] = Charge(0, "view", key, c.timing)
                self._record(c, 0)
                continue
            if kind == _PROGRAM and aee:  # fusible
                if group and (devices[i] != gdevice or streams[i] != gstream
                              or len(group) >= AEE_MAX_OPS):
                    close_group()
                gdevice, gstream = devices[i], streams[i]
                group.append(i)
                costs.append(c)
                continue
            if kind == _ESTIMATED:
                self.estimated[c.name] += 1
            if group:
                close_group()
            self._charge_alone(i, c, keys, out, charges)
        if group:
            close_group()
        self.cache.hits += hits
        self._lowering.close()
        return out, charges

    def _charge_alone(self, i, c, keys, out, charges):
        """One op, one launch."""
        self.launches += 1
        self.launch_total_ns += int(self.launch_ns)
        out[i] = c.ns
        if charges is not None:
            charges[i] = Charge(c.ns, "program", keys[i], c.timing, self.launch_ns)
        self._record(c, c.ns)

    def _charge_group(self, batch, keys, group, costs, out, charges, gc_pause):
        """Consecutive fusible ops of one stream: ONE program, one launch, shared in proportion
        to the ops' times alone."""
        if len(group) == 1:
            self._charge_alone(group[0], costs[0], keys, out, charges)
            return
        self.launches += 1
        self.launch_total_ns += int(self.launch_ns)
        gk = batch.group_key(group)
        shares = self._fused.get(gk)
        if shares is None:
            gc_pause.hold()
            shares = self._fused[gk] = self._fused_shares(batch, group, costs, gk)
        else:
            self.cache.hits += 1      # what the program cache would have counted
        charged, alone = shares
        self.fused_groups += 1
        self.fused_ops += len(group)
        for i, c, ns in zip(group, costs, charged):
            out[i] = ns
            if charges is not None:
                charges[i] = Charge(ns, "program", keys[i], c.timing,
                                    self.launch_ns * c.timing.total_ns / alone, group[0])
            self._record(c, ns, True)

    def _fused_shares(self, batch, group, costs, gk) -> tuple:
        """(ns of each op, the ops' ns alone) of the fused group `gk`: its launch and program
        shared in proportion to the ops' times alone, the last op taking the rounding."""
        def specs():                # only on a cache miss
            self._lowering.tick(note=f"{len(group)} fused ops")
            return _group_specs(batch, group, costs)
        ft = self.cache.lower_sequence(specs, self.chip, self.lnc, keys=(gk,),
                                       standalone=[c.timing for c in costs])
        total = self.launch_ns + ft.total_ns
        alone = sum(c.timing.total_ns for c in costs) or 1.0
        charged, last = [], len(costs) - 1
        for n, c in enumerate(costs):
            charged.append(int(round(total * c.timing.total_ns / alone)) if n < last
                           else int(round(total)) - sum(charged))
        return tuple(charged), alone

    # ---- reports --------------------------------------------------------------------------
    def breakdown(self) -> dict:
        engines = {e: 0.0 for e in ENGINES}
        ops = {}
        for name, s in sorted(self.ops.items(), key=lambda kv: -kv[1].ns):
            for e, v in s.engine_ns.items():
                engines[e] = engines.get(e, 0.0) + v
            ops[name] = {"count": s.count, "ns": s.ns, "engine_ns": dict(s.engine_ns),
                         "hbm_bytes": s.hbm_bytes, "estimated": s.estimated, "fused": s.fused}
        st = self.cache.stats()
        return {"instance": self.instance.name, "lnc": self.lnc, "total_ns": self.total_ns,
                "launches": self.launches, "launch_ns": self.launch_total_ns,
                "aee": self.aee_enabled(), "fused_groups": self.fused_groups,
                "fused_ops": self.fused_ops, "engine_ns": engines,
                "hbm_bytes": sum(s.hbm_bytes for s in self.ops.values()), "ops": ops,
                "estimated_ops": dict(self.estimated), "cache": st,
                "cost_model_s": self.cost_s}

    def report(self, top: int = 15) -> str:
        b = self.breakdown()
        tot = b["total_ns"] or 1
        c = b["cache"]
        lines = [f"simulated device time {b['total_ns'] / 1e6:.3f} ms on {b['instance']} "
                 f"(LNC={b['lnc']}), {b['launches']} program launches "
                 f"({b['launch_ns'] / 1e6:.3f} ms launch overhead); AEE "
                 f"{'on' if b['aee'] else 'off'}: {b['fused_ops']} ops in "
                 f"{b['fused_groups']} fused programs",
                 "engine busy (ms): " + ", ".join(f"{e} {v / 1e6:.3f}"
                                                  for e, v in b["engine_ns"].items() if v),
                 f"HBM traffic {b['hbm_bytes'] / 1e6:.1f} MB; program cache: "
                 f"{c['hit_rate'] * 100:.1f}% hits ({c['hits']}/{c['hits'] + c['misses']}), "
                 f"lowering {c['lower_s'] * 1e3:.0f} ms",
                 f"{'op':42s} {'count':>6s} {'ms':>9s} {'%':>6s}  "
                 + " ".join(f"{e:>8s}" for e in _TABLE_ENGINES)]
        for name, s in list(b["ops"].items())[:top]:
            e = s["engine_ns"]
            lines.append(f"{name[:42]:42s} {s['count']:6d} {s['ns'] / 1e6:9.3f} "
                         f"{100 * s['ns'] / tot:6.1f}  "
                         + " ".join(f"{e.get(k, 0.0) / 1e6:8.3f}" for k in _TABLE_ENGINES)
                         + ("  (estimated)" if s["estimated"] else ""))
        # the same window as the table (since reset_stats), not the process-wide estimated_ops
        est = {name: s["estimated"] for name, s in b["ops"].items() if s["estimated"]}
        lines.append("estimated (roofline, no lowering rule): " +
                     (", ".join(f"{k} x{v}" for k, v in sorted(est.items())) if est else "none"))
        return "\n".join(lines)
