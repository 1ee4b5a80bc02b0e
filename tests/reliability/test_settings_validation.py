"""Every setting of the project is declared once with the one `Setting` class, parsed by one
parser, and validated in one place: a bad value never breaks `import torch`, and the first use
of the device raises an error naming the variable and its valid values."""

import pytest

from neuron_sim import config
from neuron_sim.program.builder import ProgramBuilder
from torch_neuronx import settings

from subprocess_run import exited_cleanly, run_script

BAD = {
    "NEURON_LAUNCH_BLOCKING": ("maybe", "0/1, true/false"),
    "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": ("maybe", "0/1, true/false"),
    "TORCH_NEURONX_LOG_LEVEL": ("bogus", "DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    "NEURON_SIM_REFERENCE": ("maybe", "0/1, true/false"),
    "NKI_SIM_ON_UNINITIALIZED": ("bogus", "error, warn, ignore"),
    "NEURON_SIM_DEFAULT_CHIP": ("trn9", "trn1, trn2, trn3"),
    "NEURON_LOGICAL_NC_CONFIG": ("two", "an integer >= 1"),
    "NEURON_RT_NUM_CORES": ("-1", "an integer >= 0"),
    "NEURON_SIM_CC_ALGORITHM": ("fastest", "valid values: auto, "),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_named_with_its_valid_values(name):
    raw, valid = BAD[name]
    (message,) = config.check_all({name: raw})
    assert message.startswith(f"{name}={raw!r}") and valid in message
    with pytest.raises(settings.SettingError, match=name):
        settings.validate({name: raw})


def test_defaults_and_good_values_pass():
    assert config.check_all({}) == []
    assert settings.get("TORCH_NEURONX_LOG_LEVEL", {"TORCH_NEURONX_LOG_LEVEL": "debug"}) == "DEBUG"
    assert settings.get("NEURON_LOGICAL_NC_CONFIG", {"NEURON_LOGICAL_NC_CONFIG": "1"}) == 1
    assert settings.get("NEURON_SIM_REFERENCE", {"NEURON_SIM_REFERENCE": " Yes "}) is True
    assert settings.get("NEURON_SIM_DEFAULT_CHIP", {"NEURON_SIM_DEFAULT_CHIP": ""}) == "trn2"


def test_one_setting_class_and_each_name_declared_once():
    assert settings.Setting is config.Setting
    names = [s.name for _, declared in config.declared() for s in declared]
    assert len(names) == len(set(names))
    assert all(isinstance(s, config.Setting) for _, declared in config.declared() for s in declared)
    # the torch.compile, profiling and distributed settings are part of the one list
    assert {"TORCH_NEURONX_NEFF_DISABLE_CACHE", "NEURON_SIM_PROFILE_LANES",
            "NEURON_SIM_CHECK_COLLECTIVES", "NKI_PRECISE_FP"} <= set(names)


def test_default_chip_is_read_where_no_chip_is_named(monkeypatch):
    from neuron_sim import get_chip
    assert ProgramBuilder().chip.name == "trn2"
    monkeypatch.setenv("NEURON_SIM_DEFAULT_CHIP", "trn3")
    assert ProgramBuilder().chip.name == "trn3"
    assert get_chip().name == get_chip(None).name == "trn3"


def test_bad_values_fail_at_first_device_use_not_at_import():
    proc = run_script("""
        import torch
        print("imported", flush=True)
        try:
            torch.ones(2, device="neuron")
        except RuntimeError as e:
            print("FIRST USE:", e)
    """, env={"NEURON_LAUNCH_BLOCKING": "maybe",
              "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": "maybe",
              "TORCH_NEURONX_LOG_LEVEL": "bogus"})
    assert proc.returncode == 0, exited_cleanly(proc) or proc.stderr[-3000:]
    assert "imported" in proc.stdout
    first_use = proc.stdout.split("FIRST USE:", 1)[1]
    for name in ("NEURON_LAUNCH_BLOCKING", "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS",
                 "TORCH_NEURONX_LOG_LEVEL"):
        assert f"{name}=" in first_use
    assert "valid values: DEBUG, INFO, WARNING, ERROR, CRITICAL" in first_use


def test_simulator_settings_are_no_longer_accepted_silently():
    proc = run_script("""
        import torch
        try:
            torch.ones(2, device="neuron")
            print("ACCEPTED")
        except RuntimeError as e:
            print("FIRST USE:", e)
    """, env={"NEURON_SIM_REFERENCE": "maybe", "NKI_SIM_ON_UNINITIALIZED": "bogus",
              "NEURON_SIM_DEFAULT_CHIP": "trn9"})
    assert proc.returncode == 0, exited_cleanly(proc) or proc.stderr[-3000:]
    assert "ACCEPTED" not in proc.stdout
    for name in ("NEURON_SIM_REFERENCE='maybe'", "NKI_SIM_ON_UNINITIALIZED='bogus'",
                 "NEURON_SIM_DEFAULT_CHIP='trn9'"):
        assert name in proc.stdout
