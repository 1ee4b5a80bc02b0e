"""Environment settings of the NKI front end, each declared once (type, default, help), read at
call time. Names and defaults follow AWS's NKI simulator [SimDoc] where they exist."""

from __future__ import annotations

from ..config import Setting

SETTINGS = {s.name: s for s in [
    Setting("NEURON_PLATFORM_TARGET_OVERRIDE", str, "",
            "Target of NKI kernels: trn1/gen2, trn2/gen3, trn3/gen4; unset: trn3 (AWS's default "
            "without a Neuron device). @nki.jit(platform_target=...) wins over it."),
    Setting("NKI_PRECISE_FP", bool, True,
            "1: store bfloat16/fp8 tensors in their own format (ml_dtypes), as hardware rounds; "
            "0: store them as float32 to separate algorithm bugs from rounding."),
    Setting("NKI_SIMULATOR", bool, False,
            "Accepted for compatibility: with no Neuron hardware every @nki.jit call already runs "
            "on this simulator."),
    Setting("NEURON_LOGICAL_NC_CONFIG", str, "",
            "When set, kernel[lnc](...) launches must use this LNC (1 or 2), as on hardware."),
    Setting("NKI_SIM_ON_UNINITIALIZED", str, "error",
            "What a read of never-written memory does: error (default), warn (NaN propagates, "
            "reported), ignore."),
]}


def get(name: str):
    return SETTINGS[name].get()
