"""Hardware as data: chips, instances, derived quantities, unknown names."""

import pytest

import neuron_sim as ns
from neuron_sim.hardware import ASSUMPTIONS


def test_chips_load_with_units_and_sources():
    for name in ns.list_chips():
        c = ns.get_chip(name)
        assert c.pe_rows == c.pe_cols == 128
        assert c.sbuf_partitions == 128 and c.psum_banks == 8
        assert c.source("tensor_clock_hz").startswith("aws-neuron/")
    assert ns.get_chip("TRN2") is ns.get_chip("trn2")


def test_peak_flops_derived_from_clock():
    assert ns.get_chip("trn1").tensor_peak_flops() == pytest.approx(128 * 128 * 2 * 2.8e9)
    t2 = ns.get_chip("trn2")
    assert t2.tensor_peak_flops("float32") == pytest.approx(t2.tensor_peak_flops() / 4)
    assert t2.tensor_peak_flops("float8_e4m3") == pytest.approx(2 * t2.tensor_peak_flops())
    assert ns.get_chip("trn3").tensor_peak_flops("float8_e4m3fn_x4") == pytest.approx(
        4 * ns.get_chip("trn3").tensor_peak_flops())


def test_instances_needed_by_the_backend():
    i = ns.get_instance("trn2.3xlarge")
    assert (i.chips, i.physical_cores_per_chip, i.lnc_default, i.lnc_allowed) == (1, 8, 2, (1, 2))
    assert i.logical_cores() == 4
    assert i.hbm_bytes_per_logical_core() == 24 * 2**30
    assert i.hbm_bytes_per_logical_core(lnc=1) == 12 * 2**30
    assert i.assumed
    assert ns.get_instance("trn2.48xlarge").logical_cores() == 64
    assert ns.get_instance("trn1.32xlarge").chips == 16
    assert ns.get_instance("trn1.2xlarge").logical_cores() == 2
    t3 = ns.get_instance("trn3.48xlarge")
    assert t3.chips == 16 and t3.assumed and t3.chip.has_mx_matmul
    assert i.peak_flops_per_logical_core() == pytest.approx(2 * i.chip.tensor_peak_flops())
    assert set(i.engine_clocks_hz) == {"tensor", "vector", "scalar", "gpsimd"}
    with pytest.raises(ValueError):
        ns.get_instance("trn1.2xlarge").logical_cores(lnc=2)


def test_unknown_names_list_valid_ones():
    with pytest.raises(ns.UnknownHardwareError) as e:
        ns.get_instance("trn9.huge")
    assert "trn2.48xlarge" in str(e.value) and "trn9.huge" in str(e.value)
    with pytest.raises(ns.UnknownHardwareError) as e:
        ns.get_chip("inf2")
    assert "trn1, trn2, trn3" in str(e.value)


def test_every_assumption_has_reasoning_and_all_chips():
    for a in ASSUMPTIONS.values():
        assert len(a.reasoning) > 40, a.name
        assert set(a.values) == {"trn1", "trn2", "trn3"}, a.name


def test_package_data_is_self_contained():
    from importlib import resources
    assert resources.files("neuron_sim.hardware").joinpath("trainium-hw.json").is_file()
    assert resources.files("neuron_sim.calibrate").joinpath("public.json").is_file()
