"""Trainium instances as data: a chip, a chip count, host vCPUs and the LNC setting.

The numbers come from trainium-hw.json where it lists the instance; rows marked `assumed` are not in
the data sheet and say why they exist. What the device backend needs per logical core (HBM bytes,
peak FLOP/s, HBM bandwidth, clocks) is derived here, never typed twice."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..errors import UnknownHardwareError
from .chips import Chip, _data, get_chip


@dataclass(frozen=True)
class Instance:
    name: str
    chip: Chip
    chips: int
    vcpus: int
    assumed: bool = False
    note: str = ""
    source: str = ""

    # ---- what the device backend asks (the chip's own numbers: self.chip.*) -----------------
    def _check_lnc(self, lnc):
        c = self.chip
        lnc = c.lnc_default if lnc is None else int(lnc)
        if lnc not in c.lnc_supported:
            raise ValueError(f"{self.name}: LNC={lnc} not supported; allowed {c.lnc_supported}")
        return lnc

    def logical_cores_per_chip(self, lnc: int | None = None) -> int:
        return self.chip.cores_per_chip // self._check_lnc(lnc)

    def logical_cores(self, lnc: int | None = None) -> int:
        return self.chips * self.logical_cores_per_chip(lnc)

    def hbm_bytes_per_logical_core(self, lnc: int | None = None) -> int:
        """Trn2 at LNC=2: 96 GiB / 8 physical cores x 2 = 24 GiB."""
        return self.chip.hbm_bytes // self.chip.cores_per_chip * self._check_lnc(lnc)

    def peak_flops_per_logical_core(self, dtype: str = "bfloat16", lnc: int | None = None) -> float:
        return self.chip.tensor_peak_flops(dtype) * self._check_lnc(lnc)

    def hbm_bytes_per_s_per_logical_core(self, lnc: int | None = None) -> float:
        return self.chip.hbm_bytes_per_s_per_core * self._check_lnc(lnc)


def _from_json(chip: str, key: str, name: str) -> Instance:
    raw = _data()[chip][key]
    return Instance(name=name, chip=get_chip(chip), chips=raw["chips"]["value"],
                    vcpus=raw["vcpus"]["value"], note=raw.get("topology", {}).get("value", ""),
                    source=raw["chips"]["source"])


@lru_cache(maxsize=1)
def _instances() -> dict:
    t1src = _data()["sources"]["Trn1inst"]
    rows = [
        Instance("trn1.2xlarge", get_chip("trn1"), chips=1, vcpus=8,
                 note="1 chip, 2 NeuronCores", source=t1src + " (instance table, §1a)"),
        _from_json("trn1", "instance_trn1_32xlarge", "trn1.32xlarge"),
        Instance("trn2.3xlarge", get_chip("trn2"), chips=1, vcpus=12, assumed=True,
                 note="not in the data sheet; AWS lists a 1-chip Trn2 size (8 physical cores, "
                      "4 logical at the default LNC=2); its vCPU count from the AWS instance "
                      "page, unverified here",
                 source="assumed"),
        _from_json("trn2", "instance_trn2_48xlarge", "trn2.48xlarge"),
        _from_json("trn2", "instance_trn2_ultraserver", "trn2u.48xlarge-ultraserver"),
        Instance("trn3.48xlarge", get_chip("trn3"), chips=16, vcpus=192, assumed=True,
                 note="the docs list no stand-alone Trn3 instance [Trn3inst]; one server of the "
                      "Gen1 UltraServer (4 servers x 16 chips) is modelled, its name and host "
                      "vCPUs (1/4 of the UltraServer's 768) are assumed",
                 source=_data()["sources"]["Trn3inst"]),
        _from_json("trn3", "instance_trn3_gen1_ultraserver", "trn3-gen1-ultraserver"),
        _from_json("trn3", "instance_trn3_gen2_ultraserver", "trn3-gen2-ultraserver"),
    ]
    return {r.name: r for r in rows}


def list_instances() -> list[str]:
    return list(_instances())


def select(name: str, lnc: int | None) -> tuple[Instance, int]:
    """The instance and logical core size NEURON_SIM_INSTANCE and NEURON_LOGICAL_NC_CONFIG ask
    for (`lnc` None: the chip's default); the errors list the valid values."""
    if name not in _instances():
        raise ValueError(f"Unknown simulated instance {name!r}. Valid instances: "
                         f"{', '.join(list_instances())}. Set NEURON_SIM_INSTANCE or call "
                         "torch_neuronx.set_instance(name).")
    inst = _instances()[name]
    lnc = inst.chip.lnc_default if lnc is None else lnc
    if lnc not in inst.chip.lnc_supported:
        raise ValueError(f"NEURON_LOGICAL_NC_CONFIG={lnc} is not valid for {name}; valid values: "
                         f"{', '.join(str(v) for v in inst.chip.lnc_supported)}.")
    return inst, lnc


def get_instance(name: str) -> Instance:
    """The instance `name` (e.g. 'trn2.48xlarge'); an unknown name lists the valid ones."""
    try:
        return _instances()[str(name).lower()]
    except KeyError:
        raise UnknownHardwareError("instance", name, list_instances()) from None
