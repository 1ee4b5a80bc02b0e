"""The simulated instance as the Neuron tools show it: devices (chips), their NeuronCores, the
logical core ids at the configured LNC, HBM, and the devices each one has a NeuronLink to.

The instance and LNC are the ones a new process would get: NEURON_SIM_INSTANCE and
NEURON_LOGICAL_NC_CONFIG."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import get
from ..hardware.instances import select


@dataclass(frozen=True)
class Device:
    index: int
    cores: int                 # physical NeuronCores
    core_ids: tuple            # logical (runtime) core ids at the instance's LNC
    memory_bytes: int
    connected: tuple           # device indexes one NeuronLink hop away
    bdf: str                   # simulated PCI address (there is no PCI device behind it)
    cpu_affinity: str          # host vCPUs of the device's NUMA node (simulated: split evenly)
    numa_node: int


@dataclass(frozen=True)
class Layout:
    instance: str
    lnc: int
    neuroncore_version: str    # as neuron-top names it: v2, v3 (LNC=1), v3d (LNC=2), ...
    devices: tuple

    def device_of(self, core_id: int) -> int:
        return core_id // len(self.devices[0].core_ids)

    def processes(self) -> list:
        """The registry's records of processes on this instance and LNC (tools/procs.py)."""
        from .procs import running
        return [r for r in running() if r.get("instance") == self.instance
                and r.get("lnc") == self.lnc]


def current(environ=None) -> Layout:
    name = get("NEURON_SIM_INSTANCE", environ)
    inst, lnc = select(name, get("NEURON_LOGICAL_NC_CONFIG", environ))
    per = inst.logical_cores_per_chip(lnc)
    links = _links(name, lnc, inst.chips, per)
    nodes = 2 if inst.chips > 1 else 1          # multi-chip instances have two sockets
    cpus = inst.vcpus // nodes
    numa = [d * nodes // inst.chips for d in range(inst.chips)]
    devices = tuple(Device(index=d, cores=inst.chip.cores_per_chip,
                           core_ids=tuple(range(d * per, (d + 1) * per)),
                           memory_bytes=inst.chip.hbm_bytes, connected=links[d],
                           bdf=f"0000:{d:02x}:00.0",
                           cpu_affinity=f"{numa[d] * cpus}-{(numa[d] + 1) * cpus - 1}",
                           numa_node=numa[d])
                    for d in range(inst.chips))
    version = f"v{inst.chip.neuroncore_version}" + ("d" if lnc == 2 else "")
    return Layout(instance=name, lnc=lnc, neuroncore_version=version, devices=devices)


def _links(name, lnc, chips, per):
    """Devices one NeuronLink hop away, from the collective fabric of the instance."""
    if chips == 1:
        return {0: ()}
    from ..collectives.fabric import fabric_for
    fab = fabric_for(name, lnc)
    return {c: tuple(d for d in range(chips) if d != c and fab.hops(c * per, d * per) == 1)
            for c in range(chips)}


def core_ranges(ids) -> str:
    """(0, 1, 2, 3) -> '0-3'; (0, 2) -> '0, 2'."""
    ids = sorted(ids)
    if len(ids) > 1 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}-{ids[-1]}"
    return ", ".join(str(i) for i in ids)


def gb(n: int) -> str:
    """Device memory as neuron-ls prints it ('96 GB')."""
    return f"{n / 2**30:.0f} GB"
