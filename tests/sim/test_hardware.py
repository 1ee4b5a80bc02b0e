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


def test_every_field_names_where_its_value_comes_from():
    t2, t3 = ns.get_chip("trn2"), ns.get_chip("trn3")
    # data entries stored under another name keep their source under the field they fill
    assert t2.source("hbm_bytes_per_s") == t2.sources["hbm_bytes_per_s"]
    assert "assumption" not in t2.source("hbm_bytes_per_s")
    assert t2.source("cores_per_chip") and "assumption" not in t2.source("cores_per_chip")
    # a value only measured on Trn2 says so on the chip that borrows it
    assert t3.source("pe_row_tile_sizes").startswith("Trn2's value, taken for trn3: ")
    assert ASSUMPTIONS["dependent_latency_cycles"].reasoning in t2.source("dependent_latency_cycles")
    assert t2.source("has_mx_matmul").startswith("derived from the data sheet")
    with pytest.raises(KeyError, match="no field 'clock'"):
        t2.source("clock")


def test_peak_flops_derived_from_clock():
    assert ns.get_chip("trn1").tensor_peak_flops() == pytest.approx(128 * 128 * 2 * 2.8e9)
    t2 = ns.get_chip("trn2")
    assert t2.tensor_peak_flops("float32") == pytest.approx(t2.tensor_peak_flops() / 4)
    assert t2.tensor_peak_flops("float8_e4m3") == pytest.approx(2 * t2.tensor_peak_flops())
    assert ns.get_chip("trn3").tensor_peak_flops("float8_e4m3fn_x4") == pytest.approx(
        4 * ns.get_chip("trn3").tensor_peak_flops())


def test_instances_needed_by_the_backend():
    i = ns.get_instance("trn2.3xlarge")
    assert (i.chips, i.chip.cores_per_chip, i.chip.lnc_default, i.chip.lnc_supported) == (1, 8, 2, (1, 2))
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


# Hardware numbers and generation differences live in neuron_sim/hardware; code reads `chip.*`.
# Outside it, code (not strings or comments) may hold a hardware size (see _hardware_sizes), a
# chip name, or a NeuronCore-version comparison only in these files, at most this many times, for
# the reason given.
_LITERALS_ALLOWED = {
    "neuron_sim/calibrate/__init__.py": (31, "each published measurement names its chip, shape"),
    "neuron_sim/calibrate/programs.py": (16, "the published kernels, on the chip measured"),
    "neuron_sim/calibrate/mamba.py": (1, "the Mamba kernel's own sequence tile"),
    "neuron_sim/config.py": (1, "the default of NEURON_SIM_DEFAULT_CHIP"),
    "neuron_sim/nki/target.py": (1, "NKI's default platform target"),
    "neuron_sim/cli.py": (1, "a default token count"),
    "neuron_sim/collectives/__main__.py": (3, "rank layouts of the published 128-rank example"),
    "neuron_sim/lower/api.py": (1, "the most slices a fused loop is timed in (1 << 14)"),
    "neuron_sim/program/repeat.py": (1, "starting capacities of the repeat recorder's arrays"),
    "backend/torch_neuronx/estimate.py": (11, "Hugging Face model configs (head_dim 128, hidden "
                                          "size 2048), a default of 128 generated tokens"),
    "backend/torch_neuronx/fp8_linear.py": (1, "cuBLAS's block-scale layout (128 rows)"),
    "backend/torch_neuronx/profiling/hook.py": (1, "how many outputs a trimmed session keeps"),
}


def _hardware_sizes() -> set:
    """Sizes of the partitions, the PE array, PSUM and SBUF on every chip, as code would spell
    them (128, 512, 2048 PSUM bytes per bank, 16 KiB per partition, 192 KiB, 24 MiB, ...)."""
    sizes = set()
    for c in map(ns.get_chip, ns.list_chips()):
        per_partition = (c.psum_bank_bytes_per_partition, c.psum_bytes_per_partition,
                         c.sbuf_bytes_per_partition, c.sbuf_usable_bytes_per_partition)
        sizes |= {c.sbuf_partitions, c.pe_rows, c.pe_cols, c.psum_bank_fp32_elems, *per_partition,
                  *(n * c.sbuf_partitions for n in per_partition)}
    return sizes


def _hardware_literals(path, root, sizes):
    """Chip names, hardware sizes (also spelled as constant arithmetic: 192 * 1024, 2 << 10) and
    comparisons with a NeuronCore version (nc_version, neuroncore_version, get_nc_version(),
    nc_version.gen3) in the code of one file."""
    import ast
    import operator
    ops = {ast.Mult: operator.mul, ast.LShift: operator.lshift, ast.Pow: operator.pow}

    def fold(n):
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in ops:
            a, b = fold(n.left), fold(n.right)
            return None if a is None or b is None else ops[type(n.op)](a, b)
        return None

    def versioned(n):
        return any(isinstance(x, ast.Attribute) and x.attr in ("nc_version", "neuroncore_version")
                   or isinstance(x, ast.Name) and x.id in ("nc_version", "get_nc_version")
                   for x in ast.walk(n))

    names = {n.lower() for n in ns.list_chips()}
    text = path.read_text()
    tree = ast.parse(text)
    folded = set()        # operands of a folded expression, counted once as the whole
    lines = text.splitlines()
    rel = path.relative_to(root).as_posix()
    for n in ast.walk(tree):
        if id(n) in folded:
            continue
        v = fold(n)
        if v is not None:
            folded |= {id(x) for x in ast.walk(n)}
        chip = isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.lower() in names
        version = isinstance(n, ast.Compare) and versioned(n) or isinstance(
            n, ast.Attribute) and n.attr in ("gen2", "gen3", "gen4")
        if chip or version or v in sizes:
            yield f"{rel}:{n.lineno}: {lines[n.lineno - 1].strip()}"


def test_no_hardware_literals_outside_hardware():
    from pathlib import Path
    root = Path(ns.__file__).resolve().parents[1]
    sizes = _hardware_sizes()
    assert {128, 512, 2048, 16384, 192 * 1024, 24 << 20} <= sizes
    found = []
    for p in (p for d in ("neuron_sim", "backend") for p in sorted((root / d).rglob("*.py"))):
        rel = p.relative_to(root).as_posix()
        hits = [] if rel.startswith("neuron_sim/hardware/") else list(
            _hardware_literals(p, root, sizes))
        if len(hits) > _LITERALS_ALLOWED.get(rel, (0, ""))[0]:
            found += hits
    assert not found, ("read these from the chip (neuron_sim/hardware: trainium-hw.json or "
                       "assumptions.json) or ask a capability flag:\n" + "\n".join(found))


def test_the_literal_scan_sees_through_spellings(tmp_path):
    f = tmp_path / "k.py"
    f.write_text('P = 128\nSBUF = 192 * 1024\nCHIP = "TRN2"\nif chip.neuroncore_version >= 3:\n'
                 '    pass\nnew = get_nc_version() == nc_version.gen3\n'
                 'n = 64  # 128 partitions\nmsg = "128 on trn2"\nbig = 128 << 20\n')
    hits = list(_hardware_literals(f, tmp_path, _hardware_sizes()))
    assert sorted({int(h.split(":")[1]) for h in hits}) == [1, 2, 3, 4, 6]
