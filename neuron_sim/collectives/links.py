"""The numbers behind collective timing, all read from hardware data: NeuronLink and EFA
bandwidths from the data sheet (trainium-hw.json, each with its source), the fabric layout of each
instance, the documented per-step latencies and algorithm ranges, and the few values no document
gives (named assumptions with their reasoning) from fabrics.json. Nothing in
`neuron_sim.collectives` types a hardware number or branches on a chip name."""

from __future__ import annotations

import json
from functools import lru_cache, reduce
from importlib import resources

from ..hardware.assumptions import Assumption, from_data
from ..hardware.chips import _data  # the one loader of trainium-hw.json


def datasheet(chip: str, *keys: str) -> float:
    """A number of the data sheet for `chip` (trn1/trn2/trn3), e.g. 'neuronlink_ports', or of
    one of its instances (keys: the instance's entry, then the number's)."""
    return reduce(dict.__getitem__, keys, _data()[chip])["value"]


@lru_cache(maxsize=1)
def fabric_data() -> dict:
    with resources.files("neuron_sim.hardware").joinpath("fabrics.json").open() as f:
        return json.load(f)


def latency(name: str) -> float:
    """A documented per-step latency: 'neuronlink_hop_s' or 'efa_hop_s'."""
    return fabric_data()["latency"][name]["value"]


def algorithm_range(name: str) -> int:
    """Upper message size of an algorithm's range: 'mesh_below_bytes', 'rdh_below_bytes'."""
    return int(fabric_data()["algorithm_ranges"][name]["value"])


ASSUMPTIONS: dict[str, Assumption] = from_data(fabric_data()["assumptions"], chips=("all",))


def assumed(name: str):
    return ASSUMPTIONS[name].values["all"]
