"""Which Trainium instance is simulated and which of its logical NeuronCores this process
sees, from NEURON_SIM_INSTANCE (or `set_instance`) and the Neuron runtime variables."""

from __future__ import annotations

from dataclasses import dataclass

from neuron_sim.hardware.instances import select

from . import settings


@dataclass(frozen=True)
class Visible:
    instance: object          # neuron_sim.hardware.Instance
    lnc: int
    cores: tuple              # runtime (VNC) ids of the visible logical cores

    @property
    def device_count(self) -> int:
        return len(self.cores)

    @property
    def hbm_bytes_per_device(self) -> int:
        return self.instance.hbm_bytes_per_logical_core(self.lnc)


def parse_cores(spec, name: str, total: int | None = None) -> tuple:
    """'0,1,2-5' -> (0, 1, 2, 3, 4, 5), in the order given, repeats dropped. `name` is the
    setting the errors name; `total`, when known, is the number of cores the indices may reach."""
    def index(text):
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{name}={spec!r}: {text.strip()!r} is not a core index or a range "
                             "such as 0-3.") from None
        if value < 0 or total is not None and value >= total:
            cores = "" if total is None else f"; the instance has logical cores 0-{total - 1}"
            raise ValueError(f"{name}={spec!r}: core {value} does not exist{cores}.")
        return value

    cores = []
    for part in str(spec).split(","):
        if "-" in part.strip(" -"):
            lo, hi = (index(p) for p in part.split("-", 1))
            if hi < lo:
                raise ValueError(f"{name}={spec!r}: range {part.strip()} is empty.")
            cores.extend(range(lo, hi + 1))
        else:
            cores.append(index(part))
    return tuple(dict.fromkeys(cores))


def resolve(instance_name: str | None = None, environ=None) -> Visible:
    """The instance and visible cores the environment asks for; clear errors list valid values."""
    name = instance_name or settings.get("NEURON_SIM_INSTANCE", environ)
    inst, lnc = select(name, settings.get("NEURON_LOGICAL_NC_CONFIG", environ))
    total = inst.logical_cores(lnc)
    spec = settings.get("NEURON_RT_VISIBLE_CORES", environ)
    cores = parse_cores(spec, "NEURON_RT_VISIBLE_CORES", total) if spec else tuple(range(total))
    count = settings.get("NEURON_RT_NUM_CORES", environ)   # >= 0: the setting's minimum
    if count:
        if count > len(cores):
            raise ValueError(f"NEURON_RT_NUM_CORES={count} but only {len(cores)} logical cores are "
                             f"available on {name} at LNC={lnc}.")
        cores = cores[:count]
    return Visible(inst, lnc, cores)
