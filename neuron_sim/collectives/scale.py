"""Scale on paper: the time of a training step on many ranks (64 on a trn2.48xlarge) from one
rank's program and its collective pattern, without starting those ranks.

Method
1. Run the step once on a small job (one rank is enough): its simulated device time minus the
   time of its collectives is the rank's compute time; the collective log gives the pattern:
   each collective's kind, its *full* buffer size and which parallel dimension's group ran it.
2. Weak scaling: every rank keeps its batch, so compute per rank is unchanged. The full buffer
   of the collectives data and fully-sharded parallelism issue (gradient all-reduce, parameter
   all-gather, gradient reduce-scatter) does not depend on the group size either; only the
   group grows. Each collective is re-timed with `estimate()` on the target group's cores.
3. Ranks are placed row-major over the mesh (the last dimension varies fastest), rank r on
   logical core r, so a tensor-parallel dimension stays on one chip or its neighbours.
4. The step is reported two ways: serial (compute + collectives, what eager execution on one
   stream gives) and fully overlapped (max of the two), which brackets real overlap.

Limits: the groups of one dimension run concurrently on hardware and share links; the model
times one group alone (optimistic for data-parallel groups that cross the torus). Compute is
taken as identical on every rank (no stragglers, no load imbalance), and the optimizer step of a
fully-sharded run, which shrinks with the shard, is counted at its small-job size (pessimistic
by that amount). Host-side costs (data loading, Python) are not in simulated time.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from .algorithms import estimate
from .fabric import fabric_for


@dataclass(frozen=True)
class CollectiveCall:
    op: str          # neuron_sim.collectives.OPS name: all_reduce, all_gather, reduce_scatter, ...
    nbytes: int      # the full buffer (see estimate())
    axis: str        # the mesh dimension whose group runs it ("dp", "tp", ...)
    count: int = 1


@dataclass
class StepEstimate:
    instance: str
    mesh: dict
    compute_s: float
    comm_s: float
    calls: list = field(default_factory=list)   # (call, Estimate)

    @property
    def ranks(self) -> int:
        return math.prod(self.mesh.values())

    @property
    def serial_s(self) -> float:
        return self.compute_s + self.comm_s

    @property
    def overlapped_s(self) -> float:
        return max(self.compute_s, self.comm_s)

    def summary(self) -> str:
        lines = [f"{self.ranks} ranks on {self.instance}, mesh {self.mesh}: compute "
                 f"{self.compute_s * 1e3:.3f} ms + collectives {self.comm_s * 1e3:.3f} ms = "
                 f"{self.serial_s * 1e3:.3f} ms serial, {self.overlapped_s * 1e3:.3f} ms if fully "
                 "overlapped"]
        for call, est in self.calls:
            lines.append(f"  {call.count:>3} x {call.op:<15} {call.nbytes:>12} B over {call.axis} "
                         f"({est.ranks} ranks, {est.algorithm}): {est.seconds * 1e6:9.1f} us each")
        return "\n".join(lines)


def group_cores(mesh: dict, axis: str) -> list:
    """Cores of the group along `axis` that contains rank 0 (row-major placement)."""
    if axis not in mesh:
        raise ValueError(f"axis {axis!r} is not a dimension of the mesh {mesh}")
    sizes = list(mesh.values())
    stride = math.prod(sizes[list(mesh).index(axis) + 1:])    # the dimensions varying faster
    return [i * stride for i in range(mesh[axis])]


def estimate_step(compute_s: float, calls, instance: str, mesh: dict, lnc: int | None = None,
                  algorithm: str | None = None) -> StepEstimate:
    """Step time on `instance` with ranks arranged as `mesh` (e.g. {"dp": 64})."""
    fabric = fabric_for(instance, lnc)
    ranks = math.prod(mesh.values())
    if ranks > fabric.cores:
        raise ValueError(f"a mesh of {ranks} ranks does not fit {instance}: it has "
                         f"{fabric.cores} logical cores at LNC={fabric.lnc}")
    result = StepEstimate(instance, dict(mesh), compute_s, 0.0)
    for call in calls:
        est = estimate(call.op, call.nbytes, group_cores(mesh, call.axis), fabric, algorithm)
        result.calls.append((call, est))
        result.comm_s += est.seconds * call.count
    return result


def pattern_from_log(records, axis_of_group=None) -> list:
    """Collective calls from a collective log (dicts or objects with op/model_op, nbytes, group):
    identical calls are counted once with a count; `axis_of_group(group)` names each group's
    dimension (default: "dp" for every group)."""
    counts = Counter()
    for r in records:
        get = r.get if isinstance(r, dict) else (lambda k, r=r: getattr(r, k))
        op = get("model_op")
        if op in ("barrier", "send_recv"):
            continue
        axis = axis_of_group(tuple(get("group"))) if axis_of_group else "dp"
        counts[(op, int(get("nbytes")), axis)] += 1
    return [CollectiveCall(op, nbytes, axis, n) for (op, nbytes, axis), n in counts.items()]


def _padded_bytes(shape, elem_bytes: int, world: int) -> int:
    """FSDP2 shards dim 0, padded to a multiple of the group size."""
    shape = list(shape) or [1]
    return -(-shape[0] // world) * world * math.prod(shape[1:]) * elem_bytes


def fsdp2_pattern(root_shapes, unit_shapes, world: int, elem_bytes: int = 4,
                  axis: str = "dp") -> list:
    """The collectives of one FSDP2 (fully_shard) training step: the root's parameters are
    all-gathered once (kept for backward), every other unit's twice (forward, then again for
    backward after resharding), and every unit reduce-scatters its gradients once. Buffers are
    the padded full sizes, as FSDP2 sends them. `unit_shapes`: one list of parameter shapes
    per fully_shard'ed submodule."""
    root = sum(_padded_bytes(s, elem_bytes, world) for s in root_shapes)
    calls = Counter()
    if root:
        calls[("all_gather", root)] += 1
        calls[("reduce_scatter", root)] += 1
    for shapes in unit_shapes:
        nbytes = sum(_padded_bytes(s, elem_bytes, world) for s in shapes)
        calls[("all_gather", nbytes)] += 2
        calls[("reduce_scatter", nbytes)] += 1
    return [CollectiveCall(op, nbytes, axis, n) for (op, nbytes), n in calls.items()]


def ddp_pattern(param_bytes, first_bucket_bytes: int = 1 << 20, bucket_bytes: int = 25 << 20,
                axis: str = "dp") -> list:
    """The gradient all-reduces of one DDP step: parameters in reverse order filled into
    buckets (the first capped at 1 MiB, the others at 25 MiB, DDP's defaults)."""
    buckets, current, cap = [], 0, first_bucket_bytes
    for nbytes in reversed(list(param_bytes)):
        if current and current + nbytes > cap:
            buckets.append(current)
            current, cap = 0, bucket_bytes
        current += nbytes
    if current:
        buckets.append(current)
    return [CollectiveCall("all_reduce", b, axis, n) for b, n in Counter(buckets).items()]
