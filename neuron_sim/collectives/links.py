"""The numbers behind collective timing: NeuronLink / fabric bandwidths read from the hardware data
(trainium-hw.json, each with its source) and the few values the documents do not give, declared
here once as named assumptions with their reasoning. Nothing else in `neuron_sim.collectives`
types a hardware number."""

from __future__ import annotations

from ..hardware.assumptions import Assumption
from ..hardware.chips import _data  # the one loader of trainium-hw.json


def datasheet(chip: str, key: str) -> float:
    """A number of the data sheet for `chip` (trn1/trn2/trn3), e.g. 'neuronlink_ports'."""
    return _data()[chip][key]["value"]


def instance_datasheet(chip: str, instance_key: str, key: str) -> float:
    return _data()[chip][instance_key][key]["value"]


ASSUMPTIONS: dict[str, Assumption] = {a.name: a for a in [
    Assumption(
        "cc_launch_s", {"trn1": 40.7e-6, "trn2": 40.7e-6, "trn3": 40.7e-6}, "s",
        "Fixed cost of one collective (runtime launch, CC-core set-up, completion). Fitted with "
        "cc_step_sync_s to the two small-message all-reduce floors the data sheet quotes from the "
        "nccom-test examples (§5 'NeuronLink latency and collective software overhead'): ~58 us "
        "at 2 ranks (C32, flat from 1 KiB to 64 KiB) and ~300 us at 16 ranks. A ring all-reduce "
        "has 2(p-1) synchronised steps: 58 = a + 2b and 300 = a + 30b give a = 40.7 us, "
        "b = 8.64 us. The examples do not name the hardware; used for every generation."),
    Assumption(
        "cc_step_sync_s", {"trn1": 8.64e-6, "trn2": 8.64e-6, "trn3": 8.64e-6}, "s",
        "Shortest time of one algorithm step (semaphore hand-shake between neighbours through "
        "the CC-cores): a step lasts max(this, its bytes / link bandwidth). See cc_launch_s."),
    Assumption(
        "link_direction_share", {"trn1": 0.5, "trn2": 0.5, "trn3": 0.5}, "fraction",
        "The per-chip NeuronLink figures (Trn2 1,024 GB/s inside the instance over 4 ports) are "
        "read as the sum over ports and both directions, so one port moves "
        "chip_bw / ports * 0.5 per direction. The documents do not say which; this is the "
        "conservative reading."),
    Assumption(
        "torus_ring_channels", {"trn1": 2, "trn2": 2, "trn3": 1}, "rings per torus dimension",
        "Concurrent rings a collective runs over a torus: the two directions of each dimension "
        "the group spans (1 dimension: 2 rings, a 4x4 torus: 4 rings, one per port), as NCCL-"
        "style multi-channel rings do. Trn3's switched fabric has no torus: 1."),
    Assumption(
        "intra_chip_copy_share", {"trn1": 0.5, "trn2": 0.5, "trn3": 0.5}, "fraction",
        "Two logical cores of one chip exchange data through HBM with DMA: every byte is read "
        "and written once, so a transfer gets half of the sender's HBM bandwidth "
        "(hbm_bytes_per_s_per_core x LNC, hardware/assumptions.py)."),
]}


def assumed(name: str, chip: str):
    return ASSUMPTIONS[name].values[chip]
