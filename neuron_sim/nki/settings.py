"""Environment settings of the NKI front end, each declared once (type, default, valid values,
help) with the project's `Setting`, read at call time. Names and defaults follow AWS's NKI
simulator [SimDoc] where they exist."""

from __future__ import annotations

from ..config import Setting, declare
from .target import ALIASES

SETTINGS = declare(
    "NKI",
    Setting("NEURON_PLATFORM_TARGET_OVERRIDE", str, "",
            "Target of NKI kernels: trn1/gen2, trn2/gen3, trn3/gen4; unset: trn3 (AWS's default "
            "without a Neuron device). @nki.jit(platform_target=...) wins over it.",
            choices=tuple(ALIASES), case_insensitive=True),     # target.py's spellings
    Setting("NKI_PRECISE_FP", bool, True,
            "1: store bfloat16/fp8 tensors in their own format (ml_dtypes), as hardware rounds; "
            "0: store them as float32 to separate algorithm bugs from rounding."),
    Setting("NKI_SIMULATOR", bool, False,
            "Accepted for compatibility: with no Neuron hardware every @nki.jit call already runs "
            "on this simulator."),
    Setting("NKI_SIM_ON_UNINITIALIZED", str, "error",
            "What a read of never-written memory, or an output a kernel never wrote, does: error "
            "(default), warn (NaN propagates, reported), ignore.",
            choices=("error", "warn", "ignore"), case_insensitive=True),
    Setting("NEURON_SIM_CHECK_SEMANTICS", bool, False,
            "Debug mode: every NKI kernel run (nki.simulate, @nki.jit and legacy calls, kernels "
            "called from torch) also runs its built program through the ISA modules' NumPy "
            "semantics and raises NkiValidationError where the outputs differ (a "
            "check_semantics= option wins over it); with torch_neuronx, every eager op whose "
            "lowering computes the op (neuron_sim.lower.semantics.EXACT) is run the same way "
            "and compared with its CPU result (RuntimeError on a difference). Slow."),
)

# Read by the device (logical core size) and by NKI launches (kernel[lnc] must match it).
SETTINGS.update(declare(
    "device, NKI",
    Setting("NEURON_LOGICAL_NC_CONFIG", int, None,
            "Logical NeuronCore size, 1 or 2 (default: the chip's, 2 on Trn2); when set, "
            "kernel[lnc](...) launches must use the same LNC, as on hardware. The instance's "
            "valid values are checked when the device starts.", minimum=1),
))


def get(name: str):
    return SETTINGS[name].read()
