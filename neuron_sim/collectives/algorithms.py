"""Collective algorithms as cost formulas over a `Fabric`: ring, mesh (direct all-to-all sends) and
recursive halving/doubling (RDH), the algorithms nccom-test names [nccom].

Every algorithm is a sequence of synchronised steps. A step lasts
    max(peers x cc_step_sync_s, bytes moved by the busiest rank in the step / its bandwidth)
where peers is the number of ranks a rank hand-shakes with in that step (1 in a ring step,
p-1 in a mesh step)
and a collective adds cc_launch_s once (links.py gives both and their fit to the nccom-test
examples). `estimate()` picks the fastest algorithm that applies, as the runtime's automatic
choice does, unless one is named."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .fabric import Fabric, is_power_of_two
from .links import assumed

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
       "send_recv", "barrier")
ALGORITHMS = ("ring", "mesh", "rdh")
# What "auto" chooses from. RDH is left out: the nccom-test floors the latencies are fitted to
# (links.py) grow with the rank count as ring/mesh hand-shakes do, which suggests the runtime did
# not use it there; name it (NEURON_SIM_CC_ALGORITHM=rdh) to see what it would give.
AUTO = ("ring", "mesh")


@dataclass(frozen=True)
class Estimate:
    op: str
    algorithm: str
    ranks: int
    nbytes: int          # the full buffer (see estimate())
    seconds: float
    steps: int

    @property
    def ns(self) -> int:
        return int(round(self.seconds * 1e9))

    @property
    def bus_bytes_per_s(self) -> float:
        """nccom-test's 'bus bandwidth': algorithm bandwidth x the op's traffic factor."""
        p = self.ranks
        factor = {"all_reduce": 2 * (p - 1) / p, "all_gather": (p - 1) / p,
                  "reduce_scatter": (p - 1) / p, "all_to_all": (p - 1) / p}.get(self.op, 1.0)
        return self.nbytes / self.seconds * factor if self.seconds else 0.0


def _step(fabric: Fabric, nbytes: float, bw: float, peers: int = 1) -> float:
    """One synchronised step: a hand-shake with each peer, overlapped with the data."""
    return max(peers * assumed("cc_step_sync_s", fabric.chip), nbytes / bw)


def _ring_bandwidth(fabric: Fabric, cores) -> float:
    ring = fabric.ring_order(cores)
    hops = [fabric.hop_bytes_per_s(a, b) for a, b in zip(ring, ring[1:] + ring[:1])]
    inter = [bw for (a, b), bw in zip(zip(ring, ring[1:] + ring[:1]), hops)
             if fabric.chip_of(a) != fabric.chip_of(b)]
    slowest_inter = min(inter) * fabric.ring_channels(cores) if inter else math.inf
    slowest_intra = min((bw for (a, b), bw in zip(zip(ring, ring[1:] + ring[:1]), hops)
                         if fabric.chip_of(a) == fabric.chip_of(b)), default=math.inf)
    return min(slowest_inter, slowest_intra)


def _ring(op, fabric, cores, nbytes):
    p = len(cores)
    bw = _ring_bandwidth(fabric, cores)
    chunk = nbytes / p
    if op == "all_reduce":
        steps = 2 * (p - 1)
        return steps, steps * _step(fabric, chunk, bw)
    if op in ("all_gather", "reduce_scatter"):
        return p - 1, (p - 1) * _step(fabric, chunk, bw)
    if op in ("broadcast", "reduce"):
        # pipelined along the ring: p-1 hand-shakes, the buffer crosses each link once
        return p - 1, (p - 1) * assumed("cc_step_sync_s", fabric.chip) + nbytes / bw
    if op == "all_to_all":
        # each chunk travels on average p/2 hops around the ring
        return p - 1, (p - 1) * _step(fabric, chunk * p / 2, bw)
    return None


def _mesh_bandwidth(fabric: Fabric, cores) -> float:
    """What one rank can send to all others at once: the chip's injection bandwidth shared by
    the group's cores on that chip, divided by the mean hop count (each byte loads that many
    links in a torus)."""
    per_chip = {}
    for c in cores:
        per_chip[fabric.chip_of(c)] = per_chip.get(fabric.chip_of(c), 0) + 1
    if len(per_chip) == 1:
        return fabric.intra_chip_bytes_per_s
    c0 = cores[0]
    others = [c for c in cores if fabric.chip_of(c) != fabric.chip_of(c0)]
    mean_hops = sum(fabric.hops(c0, c) for c in others) / len(others)
    sharing = max(per_chip.values())
    bw = fabric.injection_bytes_per_s(c0) / sharing / max(mean_hops, 1.0)
    return min(bw, fabric.intra_chip_bytes_per_s)


def _mesh(op, fabric, cores, nbytes):
    p = len(cores)
    bw = _mesh_bandwidth(fabric, cores)
    out = nbytes * (p - 1) / p    # bytes each rank sends in one direct exchange
    if op == "all_reduce":        # direct reduce-scatter, then direct all-gather
        return 2, 2 * _step(fabric, out, bw, p - 1)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return 1, _step(fabric, out, bw, p - 1)
    if op in ("broadcast", "reduce"):
        return 1, _step(fabric, nbytes * (p - 1), bw, p - 1)
    return None


def _rdh(op, fabric, cores, nbytes):
    p = len(cores)
    if not is_power_of_two(p) or op not in ("all_reduce", "all_gather", "reduce_scatter"):
        return None
    ring = fabric.ring_order(cores)
    total, steps, size = 0.0, 0, nbytes
    for k in range(int(math.log2(p))):
        size /= 2
        dist = 1 << k
        # partners 2^k apart; their traffic crosses that many links, which it shares
        a, b = ring[0], ring[dist]
        bw = fabric.hop_bytes_per_s(a, b) / max(fabric.hops(a, b), 1)
        total += _step(fabric, size, bw)
        steps += 1
    if op == "all_reduce":        # halving then doubling
        total, steps = 2 * total, 2 * steps
    return steps, total


_FORMULAS = {"ring": _ring, "mesh": _mesh, "rdh": _rdh}


def estimate(op: str, nbytes: int, cores, fabric: Fabric, algorithm: str | None = None) -> Estimate:
    """Simulated time of collective `op` over the logical cores `cores` (global ids on `fabric`).

    `nbytes` is the full buffer: the all-reduce buffer, the all-gather *output*, the
    reduce-scatter *input*, the all-to-all input of one rank, the broadcast buffer, or the
    message of a send/recv."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    cores = list(cores)
    if len(set(cores)) != len(cores):
        raise ValueError(f"a collective group names a core twice: {cores}")
    p = len(cores)
    launch = assumed("cc_launch_s", fabric.chip)
    if p == 1:
        return Estimate(op, "local", 1, nbytes, 0.0, 0)
    if op == "barrier":
        steps = math.ceil(math.log2(p))
        return Estimate(op, "dissemination", p, 0,
                        launch + steps * assumed("cc_step_sync_s", fabric.chip), steps)
    if op == "send_recv":
        a, b = cores[0], cores[1]
        bw = fabric.hop_bytes_per_s(a, b) / max(fabric.hops(a, b), 1)
        return Estimate(op, "p2p", p, nbytes, launch + _step(fabric, nbytes, bw), 1)
    names = AUTO if algorithm in (None, "auto") else (algorithm,)
    best = None
    for name in names:
        if name not in _FORMULAS:
            raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}, auto")
        result = _FORMULAS[name](op, fabric, cores, nbytes)
        if result is None:
            continue
        steps, seconds = result
        if best is None or seconds < best.seconds:
            best = Estimate(op, name, p, nbytes, launch + seconds, steps)
    if best is None:
        raise ValueError(f"algorithm {algorithm!r} cannot run {op} on {p} ranks "
                         "(recursive halving/doubling needs a power-of-two group).")
    return best
