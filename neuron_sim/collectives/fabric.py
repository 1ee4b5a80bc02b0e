"""Where the logical NeuronCores of a job sit and how fast two of them can exchange data.

A `Fabric` maps a global logical-core id (node * cores_per_node + runtime core id) to its node
(instance), its chip and the chip to coordinates: a 2D torus of NeuronLink inside Trn1/Trn2
instances (4x4 for 16 chips), rings joining same-coordinate chips across the 4 instances of a Trn2
UltraServer, Trn3's switched fabric (one level per server, rack, and beyond), and EFA between the
`nodes` instances of a multi-instance job. Everything comes from hardware data
(`neuron_sim/hardware/fabrics.json` and the data sheet it points into); nothing here names a chip.
The algorithms in `algorithms.py` ask `hop_bytes_per_s`, `hop_latency_s`, `hops`,
`injection_bytes_per_s`, `node_of` and `efa_bytes_per_s`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..hardware import get_instance
from .links import assumed, datasheet, fabric_data, latency


@dataclass(frozen=True)
class Fabric:
    instance: str
    chip: str                 # trn1 / trn2 / trn3 (for messages only; no behaviour hangs on it)
    kind: str                 # "torus" or "switched"
    shape: tuple              # torus (rows, cols) per instance; switched: (chips per server,)
    servers: int              # instances (torus) or servers (switched) joined by NeuronLink
    cores_per_chip: int       # logical cores per chip at the chosen LNC
    lnc: int
    ports: int
    link_bytes_per_s: float   # one port, one direction
    intra_chip_bytes_per_s: float
    cross_server_bytes_per_s: float   # torus: UltraServer ring link, one direction
    switch_levels: tuple = ()         # switched: per-direction bandwidth in server, rack, beyond
    nodes: int = 1                    # instances of the job joined by EFA
    efa_bytes_per_s: float = 0.0      # one instance's EFA bandwidth, one direction
    link_hop_s: float = 0.0           # latency of one algorithm step inside an instance
    efa_hop_s: float = 0.0            # latency of one algorithm step over EFA

    # ---- geometry --------------------------------------------------------------------------
    @property
    def chips_per_server(self) -> int:
        return self.shape[0] * self.shape[1] if self.kind == "torus" else self.shape[0]

    @property
    def chips_per_node(self) -> int:
        return self.chips_per_server * self.servers

    @property
    def cores_per_node(self) -> int:
        return self.chips_per_node * self.cores_per_chip

    @property
    def cores(self) -> int:
        return self.cores_per_node * self.nodes

    def chip_of(self, core: int) -> int:
        if not 0 <= core < self.cores:
            where = f"{self.nodes} x {self.instance}" if self.nodes > 1 else self.instance
            raise ValueError(f"{where} at LNC={self.lnc} has logical cores 0-"
                             f"{self.cores - 1}; core {core} does not exist.")
        return core // self.cores_per_chip

    def node_of(self, core: int) -> int:
        return self.chip_of(core) // self.chips_per_node

    def _coords(self, chip: int):
        server, local = divmod(chip % self.chips_per_node, self.chips_per_server)
        if self.kind == "torus":
            return server, divmod(local, self.shape[1])
        return server, local

    def hops(self, a: int, b: int) -> int:
        """NeuronLink hops between the chips of cores a and b (0 on one chip; 1 between nodes:
        the EFA hop; 1 through a switch)."""
        ca, cb = self.chip_of(a), self.chip_of(b)
        if ca == cb:
            return 0
        if self.node_of(a) != self.node_of(b) or self.kind == "switched":
            return 1
        (sa, pa), (sb, pb) = self._coords(ca), self._coords(cb)
        rows, cols = self.shape
        dr, dc, ds = abs(pa[0] - pb[0]), abs(pa[1] - pb[1]), abs(sa - sb)
        return min(dr, rows - dr) + min(dc, cols - dc) + min(ds, self.servers - ds)

    def hop_bytes_per_s(self, a: int, b: int) -> float:
        """Per-direction bandwidth of the slowest link between cores a and b, one flow. Between
        instances one flow gets one chip's EFA share: each EFA interface hangs off a different
        chip (internode-collective-comm.rst, 'Flat Ring')."""
        ca, cb = self.chip_of(a), self.chip_of(b)
        if ca == cb:
            return self.intra_chip_bytes_per_s
        if self.node_of(a) != self.node_of(b):
            return self.efa_bytes_per_s / self.chips_per_node
        (sa, _), (sb, _) = self._coords(ca), self._coords(cb)
        if self.kind == "switched":
            # Racks are not described in the data: every cross-server hop uses the
            # between-servers level; the between-racks level is kept for when they are.
            return self.switch_levels[0] if sa == sb else self.switch_levels[1]
        return self.cross_server_bytes_per_s if sa != sb else self.link_bytes_per_s

    def hop_latency_s(self, a: int, b: int) -> float:
        """Latency one algorithm step between cores a and b adds (EFA or inside an instance)."""
        return self.efa_hop_s if self.node_of(a) != self.node_of(b) else self.link_hop_s

    def ring_channels(self, cores) -> int:
        """Concurrent rings a collective over `cores` runs: two per torus dimension (rows,
        columns, instances) its chips differ in (see links.py torus_ring_channels), at most one
        per port; one on a switch or a single chip."""
        if self.kind != "torus":
            return 1
        coords = [self._coords(self.chip_of(c)) for c in cores]
        dims = sum(len({f(x) for x in coords}) > 1
                   for f in (lambda x: x[1][0], lambda x: x[1][1], lambda x: x[0]))
        return min(self.ports, assumed("torus_ring_channels") * dims) if dims else 1

    def ring_order(self, cores) -> list:
        """The group in ring order: nodes, then chips in snake order over the torus, then cores
        within a chip."""
        def key(c):
            server, pos = self._coords(self.chip_of(c))
            if self.kind == "torus":
                r, col = pos
                col = col if r % 2 == 0 else self.shape[1] - 1 - col
                return (self.node_of(c), server, r, col, c)
            return (self.node_of(c), server, pos, c)
        return sorted(cores, key=key)

    def injection_bytes_per_s(self, core: int) -> float:
        """What one chip can send at once over all its ports (one direction)."""
        if self.kind == "switched":
            return self.switch_levels[0]
        return self.ports * self.link_bytes_per_s

    def by_node(self, cores) -> dict:
        """node -> the group's cores on it, in the group's order."""
        out = {}
        for c in cores:
            out.setdefault(self.node_of(c), []).append(c)
        return out


@lru_cache(maxsize=None)
def fabric_for(instance: str, lnc: int | None = None, nodes: int = 1) -> Fabric:
    """The collective fabric of `nodes` instances of `instance` (a name of
    neuron_sim.hardware.list_instances()) joined by EFA."""
    inst = get_instance(instance)
    chip = inst.chip.name
    lnc = inst.chip.lnc_default if lnc is None else int(lnc)
    layout = fabric_data()["instances"][inst.name]
    kind, shape, servers = layout["kind"], tuple(layout["shape"]), int(layout["servers"])
    share = assumed("link_direction_share")
    intra = inst.hbm_bytes_per_s_per_logical_core(lnc) * assumed("intra_chip_copy_share")
    ports = int(datasheet(chip, "neuronlink_ports"))
    if kind == "torus":
        link = datasheet(chip, layout["link_key"]) / ports * share
        cross = (datasheet(chip, layout["cross_server_key"]) / 2 * share
                 if "cross_server_key" in layout else link)   # two ring neighbours per chip
        levels = ()
    else:
        link = cross = 0.0
        levels = tuple(datasheet(chip, k) * share for k in (
            "pcie_intra_server_bw_per_chip_bytes_per_s",
            "pcie_inter_server_bw_per_chip_bytes_per_s",
            "pcie_inter_rack_bw_per_chip_bytes_per_s"))
    nodes = int(nodes)
    # bit/s -> B/s, one direction
    efa = datasheet(chip, *layout["efa_key"]) / 8 if "efa_key" in layout else 0.0
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    if nodes > 1 and not efa:
        joinable = sorted(n for n, v in fabric_data()["instances"].items() if "efa_key" in v)
        raise ValueError(f"{inst.name} has no EFA bandwidth in the hardware data, so {nodes} of "
                         f"them cannot be joined; multi-instance fabrics: {', '.join(joinable)}")
    fab = Fabric(instance=inst.name, chip=chip, kind=kind, shape=shape, servers=servers,
                 cores_per_chip=inst.logical_cores_per_chip(lnc), lnc=lnc, ports=ports,
                 link_bytes_per_s=link, intra_chip_bytes_per_s=intra,
                 cross_server_bytes_per_s=cross, switch_levels=levels, nodes=nodes,
                 efa_bytes_per_s=efa, link_hop_s=latency("neuronlink_hop_s"),
                 efa_hop_s=latency("efa_hop_s"))
    if fab.chips_per_node != inst.chips:
        raise ValueError(f"fabric layout of {inst.name} has {fab.chips_per_node} chips, "
                         f"the hardware data {inst.chips}")
    return fab


def is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0
