"""Spill instructions of the ProgramBuilder (spill_slot, spill_store, spill_reload) and the
spilling calibration kernel: bytes are counted as spill traffic, the DMAs are timed, and how much
spills follows from the chip's usable SBUF."""

import numpy as np
import pytest

import neuron_sim
from neuron_sim.calibrate import programs as P
from neuron_sim.errors import ProgramError
from neuron_sim.program import ProgramBuilder
from neuron_sim.trace.op_program import program_of_result


def _tile_io():
    """A builder with an fp32 [128, 512] HBM input x and output out, and an SBUF tile t."""
    b = ProgramBuilder("trn2")
    return (b, b.hbm("x", (128, 512), "float32"), b.hbm("out", (128, 512), "float32"),
            b.sbuf("t", (128, 512), "float32"))


def _round_trip():
    b, x, out, t = _tile_io()
    slot = b.spill_slot("t", (128, 512), "float32")
    b.dma_copy(t, x)
    store = b.spill_store(slot, t)
    b.memset(t, 0.0)                      # the tile's bytes are reused meanwhile
    reload = b.spill_reload(t, slot)
    b.tensor_scalar(t, t, "multiply", 2.0)
    b.dma_copy(out, t)
    return b, store, reload


def test_spill_dmas_are_marked_counted_and_timed():
    b, store, reload = _round_trip()
    prog = b.build()
    assert b.spill_bytes == 2 * 128 * 512 * 4
    assert prog.emits[store].params["spill"] == "store"
    assert prog.emits[reload].params["spill"] == "reload"
    assert prog.emits[store].writes[0].tensor.name == "t.spill"
    r = neuron_sim.simulate(prog)
    for i in (store, reload):
        assert prog.cols["dma_bytes"][i] == 128 * 512 * 4
        assert r.end_ns[i] - r.data_start_ns[i] > 0
    # the reload reads what the store wrote, and the use waits for the reload
    assert store in prog.deps_of(reload)
    assert reload in prog.deps_of(reload + 1)


def test_explorer_counts_spill_bytes():
    b, _, _ = _round_trip()
    op = program_of_result(neuron_sim.simulate(b.build()))
    assert op.spill_save_bytes == op.spill_reload_bytes == 128 * 512 * 4
    assert op.write_bytes == 128 * 512 * 4


def test_spill_values_round_trip():
    b, _, _ = _round_trip()
    x = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    out = neuron_sim.execute(b.build(), {"x": x})["out"]
    np.testing.assert_array_equal(out, 2 * x)


def test_spill_needs_a_slot_and_an_sbuf_tile():
    b = ProgramBuilder("trn2")
    h = b.hbm("h", (128, 512), "float32")
    t = b.sbuf("t", (128, 512), "float32")
    with pytest.raises(ProgramError, match="spill_slot"):
        b.spill_store(h, t)
    slot = b.spill_slot("t", (128, 512), "float32")
    with pytest.raises(ProgramError, match="SBUF"):
        b.spill_reload(b.hbm("g", (128, 512), "float32"), slot)


def test_spill_refetch_reads_the_source_again_and_counts_as_a_reload():
    b, x, out, t = _tile_io()
    b.dma_copy(t, x)
    b.memset(t, 0.0)                      # the tile's bytes are reused meanwhile
    row = b.spill_refetch(t, x)
    b.dma_copy(out, t)
    prog = b.build()
    assert prog.emits[row].params["spill"] == "reload" and b.spill_bytes == 128 * 512 * 4
    xs = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    np.testing.assert_array_equal(neuron_sim.execute(prog, {"x": xs})["out"], xs)
    with pytest.raises(ProgramError, match="HBM data"):
        b.spill_refetch(t, b.sbuf("u", (128, 512), "float32"))


def _c8(chip):
    """The C8 kernel on one N block (spills depend on M and the blocks, not on N)."""
    return P.matmul_fully_blocked(chip, N=1024, dtype="float32", name="C8 one N block")


def _spilled(prog):
    return sum(prog.cols["dma_bytes"][i] for i, e in enumerate(prog.emits) if "spill" in e.params)


def test_c8_fits_trn2_usable_sbuf_by_spilling():
    prog = _c8("trn2")            # the capacity check is on: building it proves it fits
    chip = neuron_sim.get_chip("trn2")
    sbuf = [t for t in prog.tensors if t.memory.name == "SBUF"]
    assert sum(t.bytes_per_partition for t in sbuf) <= chip.sbuf_usable_bytes_per_partition
    assert _spilled(prog) > 0


def test_spill_follows_usable_sbuf():
    """Less SBUF spills more; Trn3's 240 KiB hold every partial sum."""
    spilled = {c: _spilled(_c8(c)) for c in ("trn1", "trn2", "trn3")}
    assert spilled["trn1"] > spilled["trn2"] > spilled["trn3"] == 0


def test_c4_unchanged_no_spill_and_double_buffered():
    prog = P.matmul_fully_blocked("trn1", N=1024)
    assert _spilled(prog) == 0
    names = {t.name for t in prog.tensors}
    assert {"lhsT_tiles0", "lhsT_tiles1", "rhs_tiles0", "rhs_tiles1"} <= names
