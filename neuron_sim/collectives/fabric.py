"""Where the logical NeuronCores of an instance sit and how fast two of them can exchange data.

A `Fabric` maps a global logical-core id (node * cores_per_node + runtime core id) to its chip
and the chip to coordinates: a 2D torus of NeuronLink inside Trn1/Trn2 instances (4x4 for 16
chips), rings joining same-coordinate chips across the 4 instances of a Trn2 UltraServer, and
Trn3's switched PCIe fabric (one level per server, rack, and beyond). The algorithms in
`algorithms.py` only ask `hop_bytes_per_s`, `hops` and `injection_bytes_per_s`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ..hardware import get_instance
from .links import assumed, datasheet

# Which fabric each instance has, and its shape. Switched: chips per server level.
_LAYOUT = {
    "trn1.2xlarge": ("torus", (1, 1), 1),
    "trn1.32xlarge": ("torus", (4, 4), 1),
    "trn2.3xlarge": ("torus", (1, 1), 1),
    "trn2.48xlarge": ("torus", (4, 4), 1),
    "trn2u.48xlarge-ultraserver": ("torus", (4, 4), 4),   # 4 instances joined in rings
    "trn3.48xlarge": ("switched", 16, 1),
    "trn3-gen1-ultraserver": ("switched", 16, 4),
    "trn3-gen2-ultraserver": ("switched", 4, 36),
}


@dataclass(frozen=True)
class Fabric:
    instance: str
    chip: str                 # trn1 / trn2 / trn3
    kind: str                 # "torus" or "switched"
    shape: tuple              # torus (rows, cols) per instance; switched: (chips per server,)
    servers: int              # instances (torus) or servers (switched) joined in the domain
    cores_per_chip: int       # logical cores per chip at the chosen LNC
    lnc: int
    ports: int
    link_bytes_per_s: float   # one port, one direction
    intra_chip_bytes_per_s: float
    cross_server_bytes_per_s: float   # torus: UltraServer ring link, one direction
    switch_levels: tuple = ()         # switched: per-direction bandwidth inside server, rack, beyond

    # ---- geometry --------------------------------------------------------------------------
    @property
    def chips_per_server(self) -> int:
        return self.shape[0] * self.shape[1] if self.kind == "torus" else self.shape[0]

    @property
    def cores(self) -> int:
        return self.chips_per_server * self.servers * self.cores_per_chip

    def chip_of(self, core: int) -> int:
        if not 0 <= core < self.cores:
            raise ValueError(f"{self.instance} at LNC={self.lnc} has logical cores 0-"
                             f"{self.cores - 1}; core {core} does not exist.")
        return core // self.cores_per_chip

    def _coords(self, chip: int):
        server, local = divmod(chip, self.chips_per_server)
        if self.kind == "torus":
            return server, divmod(local, self.shape[1])
        return server, local

    def hops(self, a: int, b: int) -> int:
        """NeuronLink hops between the chips of cores a and b (0 on one chip)."""
        ca, cb = self.chip_of(a), self.chip_of(b)
        if ca == cb:
            return 0
        (sa, pa), (sb, pb) = self._coords(ca), self._coords(cb)
        if self.kind == "switched":
            return 1
        rows, cols = self.shape
        dr = abs(pa[0] - pb[0])
        dc = abs(pa[1] - pb[1])
        ds = abs(sa - sb)
        return (min(dr, rows - dr) + min(dc, cols - dc) + min(ds, self.servers - ds))

    def hop_bytes_per_s(self, a: int, b: int) -> float:
        """Per-direction bandwidth of the slowest link between cores a and b, one flow."""
        ca, cb = self.chip_of(a), self.chip_of(b)
        if ca == cb:
            return self.intra_chip_bytes_per_s
        (sa, _), (sb, _) = self._coords(ca), self._coords(cb)
        if self.kind == "switched":
            # Racks are not described in the data: every cross-server hop uses the
            # between-servers level; the between-racks level is kept for when they are.
            return self.switch_levels[0] if sa == sb else self.switch_levels[1]
        return self.cross_server_bytes_per_s if sa != sb else self.link_bytes_per_s

    def torus_dims_spanned(self, cores) -> int:
        """How many torus dimensions (rows, columns, instances) a group's chips differ in."""
        if self.kind != "torus":
            return 0
        coords = [self._coords(self.chip_of(c)) for c in cores]
        return sum(len({f(x) for x in coords}) > 1
                   for f in (lambda x: x[1][0], lambda x: x[1][1], lambda x: x[0]))

    def ring_channels(self, cores) -> int:
        """Concurrent rings a collective over `cores` runs (see torus_ring_channels)."""
        dims = self.torus_dims_spanned(cores)
        if dims == 0:
            return 1
        return min(self.ports, assumed("torus_ring_channels", self.chip) * dims)

    def ring_order(self, cores) -> list:
        """The group in ring order: chips in snake order over the torus, cores within a chip."""
        def key(c):
            server, pos = self._coords(self.chip_of(c))
            if self.kind == "torus":
                r, col = pos
                col = col if r % 2 == 0 else self.shape[1] - 1 - col
                return (server, r, col, c)
            return (server, pos, c)
        return sorted(cores, key=key)

    def injection_bytes_per_s(self, core: int) -> float:
        """What one chip can send at once over all its ports (one direction)."""
        if self.kind == "switched":
            return self.switch_levels[0]
        return self.ports * self.link_bytes_per_s


@lru_cache(maxsize=None)
def fabric_for(instance: str, lnc: int | None = None) -> Fabric:
    """The collective fabric of `instance` (a name of neuron_sim.hardware.list_instances())."""
    inst = get_instance(instance)
    chip = inst.chip.name
    lnc = inst.lnc_default if lnc is None else int(lnc)
    kind, shape, servers = _LAYOUT[inst.name]
    share = assumed("link_direction_share", chip)
    intra = inst.hbm_bytes_per_s_per_logical_core(lnc) * assumed("intra_chip_copy_share", chip)
    ports = int(datasheet(chip, "neuronlink_ports"))
    if kind == "torus":
        key = ("neuronlink_intra_instance_bw_per_chip_bytes_per_s"
               if chip == "trn2" else "neuronlink_bw_per_chip_bytes_per_s")
        link = datasheet(chip, key) / ports * share
        cross = (datasheet(chip, "neuronlink_inter_instance_bw_per_chip_bytes_per_s") / 2 * share
                 if servers > 1 else link)   # two ring neighbours per chip
        levels = ()
    else:
        link = cross = 0.0
        levels = tuple(datasheet(chip, k) * share for k in (
            "pcie_intra_server_bw_per_chip_bytes_per_s", "pcie_inter_server_bw_per_chip_bytes_per_s",
            "pcie_inter_rack_bw_per_chip_bytes_per_s"))
        shape = (shape,)
    chips_per_server = shape[0] * shape[1] if kind == "torus" else shape[0]
    if chips_per_server * servers != inst.chips:
        raise ValueError(f"fabric layout of {inst.name} has {chips_per_server * servers} chips, "
                         f"the hardware data {inst.chips}")
    return Fabric(instance=inst.name, chip=chip, kind=kind, shape=shape, servers=servers,
                  cores_per_chip=inst.logical_cores_per_chip(lnc), lnc=lnc, ports=ports,
                  link_bytes_per_s=link, intra_chip_bytes_per_s=intra,
                  cross_server_bytes_per_s=cross, switch_levels=levels)


def is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0 and math.log2(n).is_integer()
