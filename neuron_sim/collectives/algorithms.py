"""Collective algorithms as cost formulas over a `Fabric`: the ones the Neuron runtime documents
(intranode- and internode-collective-comm.rst): ring, KangaRing, mesh (direct sends), recursive
halving/doubling (RDH), and the hierarchical composition used when a group spans instances.

Every algorithm is a sequence of synchronised steps; a step costs its hop latency (NeuronLink
~1.5 us, EFA ~15 us: fabrics.json) plus the bytes the busiest rank moves in it over its
bandwidth. A stand-alone collective (launched by the runtime: eager torch.distributed, nccom-test)
lasts max(cc_launch_floor_s, cc_setup_s + steps); inside a compiled graph only the steps count.

The algorithm is chosen as the runtime does, by message size inside an instance and
hierarchically across instances (`choose`, `_hierarchical`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .fabric import Fabric, is_power_of_two
from .links import assumed

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
       "send_recv", "barrier")
ALGORITHMS = ("ring", "kangaring", "mesh", "rdh", "hierarchical")
AUTO = "auto"   # the runtime's choice by size and topology
_RS_AG = ("all_reduce", "all_gather", "reduce_scatter")


@dataclass(frozen=True)
class Estimate:
    op: str
    algorithm: str
    ranks: int
    nbytes: int          # the full buffer (see estimate())
    seconds: float
    steps: int
    in_graph: bool = False

    @property
    def ns(self) -> int:
        return int(round(self.seconds * 1e9))


def _hop_s(fabric: Fabric, cores) -> float:
    """Step latency of a group: EFA when it spans instances."""
    return fabric.efa_hop_s if len(fabric.by_node(cores)) > 1 else fabric.link_hop_s


def _per_chip(fabric, cores) -> dict:
    """chip -> the group's cores on it, in the group's order."""
    out = {}
    for c in cores:
        out.setdefault(fabric.chip_of(c), []).append(c)
    return out


def _ring_bandwidth(fabric: Fabric, cores) -> float:
    ring = fabric.ring_order(cores)
    pairs = list(zip(ring, ring[1:] + ring[:1]))
    inter = [fabric.hop_bytes_per_s(a, b) for a, b in pairs
             if fabric.chip_of(a) != fabric.chip_of(b)]
    slowest_inter = min(inter) * fabric.ring_channels(cores) if inter else math.inf
    slowest_intra = min((fabric.hop_bytes_per_s(a, b) for a, b in pairs
                         if fabric.chip_of(a) == fabric.chip_of(b)), default=math.inf)
    return min(slowest_inter, slowest_intra)


def _ring(op, fabric, cores, nbytes, members=None):
    """A ring of `members` ranks carrying the group's buffer (ring: every rank, the default;
    KangaRing: the primaries, each also carrying its secondary's chunk)."""
    p = members or len(cores)
    bw = _ring_bandwidth(fabric, cores)
    hop = _hop_s(fabric, cores)
    chunk = nbytes / p
    if op in _RS_AG:             # all-reduce: a reduce-scatter, then an all-gather
        steps = (2 if op == "all_reduce" else 1) * (p - 1)
        return steps, steps * (hop + chunk / bw)
    if op in ("broadcast", "reduce"):
        # pipelined along the ring: p-1 hops, the buffer crosses each link once
        return p - 1, (p - 1) * hop + nbytes / bw
    if op == "all_to_all":
        # each chunk travels on average p/2 hops around the ring
        return p - 1, (p - 1) * (hop + chunk * p / 2 / bw)
    return None


def _kangaring(op, fabric, cores, nbytes):
    """Ranks of a chip paired primary/secondary; only primaries form the ring (half the hops);
    a transfer duplicates its write to the secondary (intranode-collective-comm.rst)."""
    chips = _per_chip(fabric, cores) if op in _RS_AG else {}
    if len(chips) < 2 or not all(len(v) >= 2 and len(v) % 2 == 0 for v in chips.values()):
        return None
    return _ring(op, fabric, cores, nbytes, len(cores) // 2)


def _mesh_bandwidth(fabric: Fabric, cores) -> float:
    """What one rank can send to all others at once: the chip's injection bandwidth shared by
    the group's cores on that chip, divided by the mean hop count (each byte loads that many
    links in a torus: the over-subscription the runtime documents)."""
    chips = _per_chip(fabric, cores)
    if len(chips) == 1:
        return fabric.intra_chip_bytes_per_s
    c0 = cores[0]
    others = [c for c in cores if fabric.chip_of(c) != fabric.chip_of(c0)]
    if len(fabric.by_node(cores)) > 1:     # flat mesh over EFA: the node's EFA, shared
        return fabric.efa_bytes_per_s / max(len(fabric.by_node(cores)[fabric.node_of(c0)]), 1)
    mean_hops = sum(fabric.hops(c0, c) for c in others) / len(others)
    sharing = max(len(v) for v in chips.values())
    bw = fabric.injection_bytes_per_s(c0) / sharing / max(mean_hops, 1.0)
    return min(bw, fabric.intra_chip_bytes_per_s)


def _mesh(op, fabric, cores, nbytes):
    p = len(cores)
    bw = _mesh_bandwidth(fabric, cores)
    hop = _hop_s(fabric, cores)
    out = nbytes * (p - 1) / p    # bytes each rank sends in one direct exchange
    if op in _RS_AG or op == "all_to_all":   # all-reduce: direct reduce-scatter, then all-gather
        k = 2 if op == "all_reduce" else 1
        return k, k * (hop + out / bw)
    if op in ("broadcast", "reduce"):
        return 1, hop + nbytes * (p - 1) / bw
    return None


def _rdh(op, fabric, cores, nbytes):
    """As the runtime runs it on a torus (intranode-collective-comm.rst): an intra-chip stage
    (the y ranks of a chip reduce-scatter B to B / y), then recursive halving over the x chips,
    which the 2D torus embeds as a hypercube (Gray-code order: every partner one hop away), one
    axis direction per step; all-gather mirrors it. The y ranks of a chip run their inter-chip
    exchanges at once and share the chip's ports."""
    chips = _per_chip(fabric, cores)
    per = {len(v) for v in chips.values()}
    x = len(chips)
    if op not in _RS_AG or len(per) != 1 or not is_power_of_two(x) \
            or not is_power_of_two(next(iter(per))):
        return None
    y = per.pop()
    total, steps = 0.0, 0
    if y > 1:                      # intra-chip stage through HBM
        total += fabric.link_hop_s + nbytes * (y - 1) / y / fabric.intra_chip_bytes_per_s
        steps += 1
    if x > 1:
        ring = fabric.ring_order([v[0] for v in chips.values()])
        pairs = list(zip(ring, ring[1:] + ring[:1]))
        bw = min(fabric.hop_bytes_per_s(a, b) for a, b in pairs)
        if fabric.kind == "torus" and len(fabric.by_node(cores)) == 1:
            bw *= min(fabric.ports, y) / y
        hop = max(fabric.hop_latency_s(a, b) for a, b in pairs)
        size = nbytes / y
        for _k in range(int(math.log2(x))):
            size /= 2
            total += hop + size / bw
            steps += 1
    if op == "all_reduce":        # halving then doubling
        total, steps = 2 * total, 2 * steps
    return steps, total


def _hierarchical(op, fabric, cores, nbytes):
    """A group spanning instances (internode-collective-comm.rst, 'Hierarchical'): with X
    instances of Y ranks each, all-reduce = intra reduce-scatter (B over Y) + inter all-reduce
    (B / Y over X, the Y inter groups sharing the instance's EFA) + intra all-gather; all-gather
    runs inter first, reduce-scatter intra first. Each stage chooses its own algorithm."""
    groups = fabric.by_node(cores)
    sizes = {len(g) for g in groups.values()}
    if op not in _RS_AG or len(groups) < 2 or len(sizes) != 1:
        return None
    y = sizes.pop()
    x = len(groups)
    local = next(iter(groups.values()))
    total, steps = 0.0, 0
    if y > 1:
        for sub in ("reduce_scatter", "all_gather") if op == "all_reduce" else (op,):
            s, t = _FORMULAS[choose(sub, nbytes, local, fabric)](sub, fabric, local, nbytes)
            total, steps = total + t, steps + s
    # the inter-instance stage: one rank per instance, B / Y each, Y groups at once on the EFA;
    # mesh, RDH or ring over the instances, whichever is fastest for this shard
    shard = nbytes / y
    efa_share = fabric.efa_bytes_per_s / y
    hop = fabric.efa_hop_s
    k = 2 if op == "all_reduce" else 1
    forms = [(k, k * (hop + shard * (x - 1) / x / efa_share)),                     # mesh
             (k * (x - 1), k * (x - 1) * (hop + shard / x / efa_share))]           # ring
    if is_power_of_two(x):                                                         # RDH
        forms.append((k * int(math.log2(x)),
                      k * (int(math.log2(x)) * hop + shard * (x - 1) / x / efa_share)))
    s, t = min(forms, key=lambda f: f[1])
    return steps + s, total + t


_FORMULAS = {"ring": _ring, "kangaring": _kangaring, "mesh": _mesh, "rdh": _rdh,
             "hierarchical": _hierarchical}


def choose(op: str, nbytes: int, cores, fabric: Fabric) -> str:
    """The algorithm the runtime picks: hierarchical for a group spanning instances (when its
    instances hold as many ranks each), otherwise the fastest that applies. The runtime's
    documented size ranges (mesh < 1 MiB, RDH 1-56 MiB, KangaRing above: fabrics.json) are what
    this gives on a trn2.48xlarge; tests/distributed/test_collective_model.py checks it."""
    cores = list(cores)
    if len(fabric.by_node(cores)) > 1 and _hierarchical(op, fabric, cores, nbytes) is not None:
        return "hierarchical"
    best, best_s = None, math.inf
    for name in ("mesh", "rdh", "kangaring", "ring"):
        r = _FORMULAS[name](op, fabric, cores, nbytes)
        if r is not None and r[1] < best_s:
            best, best_s = name, r[1]
    return best


def estimate(op: str, nbytes: int, cores, fabric: Fabric, algorithm: str | None = None,
             in_graph: bool = False) -> Estimate:
    """Simulated time of collective `op` over the logical cores `cores` (global ids on `fabric`).

    `nbytes` is the full buffer: the all-reduce buffer, the all-gather *output*, the
    reduce-scatter *input*, the all-to-all input of one rank, the broadcast buffer, or the
    message of a send/recv. `algorithm`: None/'auto' for the runtime's choice, or one of
    ALGORITHMS. `in_graph`: the collective is part of a compiled graph (no stand-alone launch)."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    cores = list(cores)
    if len(set(cores)) != len(cores):
        raise ValueError(f"a collective group names a core twice: {cores}")
    for c in cores:
        fabric.chip_of(c)   # raises for a core that does not exist
    p = len(cores)
    if p == 1:
        return Estimate(op, "local", 1, nbytes, 0.0, 0, in_graph)

    def total(alg_s):
        if in_graph:
            return alg_s
        return max(assumed("cc_launch_floor_s"), assumed("cc_setup_s") + alg_s)

    if op == "barrier":
        steps = math.ceil(math.log2(p))
        return Estimate(op, "dissemination", p, 0, total(steps * _hop_s(fabric, cores)), steps,
                        in_graph)
    if op == "send_recv":
        a, b = cores[0], cores[1]
        bw = fabric.hop_bytes_per_s(a, b) / max(fabric.hops(a, b), 1)
        return Estimate(op, "p2p", p, nbytes,
                        total(fabric.hop_latency_s(a, b) + nbytes / bw), 1, in_graph)
    name = choose(op, nbytes, cores, fabric) if algorithm in (None, AUTO) else algorithm
    if name not in _FORMULAS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}, auto")
    result = _FORMULAS[name](op, fabric, cores, nbytes)
    if result is None:
        raise ValueError(f"algorithm {name!r} cannot run {op} on this group of {p} ranks "
                         "(recursive halving/doubling needs a power-of-two group; KangaRing "
                         "pairs of ranks on each chip; hierarchical a group spanning instances "
                         "with as many ranks on each). Use algorithm='auto'.")
    steps, seconds = result
    return Estimate(op, name, p, nbytes, total(seconds), steps, in_graph)
