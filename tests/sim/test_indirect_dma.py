"""isa/dma/dma_copy.py's indirect form: a gather, scatter or scatter-add of HBM rows at the
indices an SBUF tile holds (software DGE), run through the NumPy semantics and checked against
NumPy indexing; its bounds (oob_mode), its refusals, its cost (one descriptor per index) and the
whole-table footprint the dependency tracker sees."""

import numpy as np
import pytest

from neuron_sim.errors import CapabilityError, FreeSizeError, ProgramError
from neuron_sim.interpreter import execute
from neuron_sim.program.ap import AccessPattern, IndirectPattern
from neuron_sim.program.builder import ProgramBuilder

V, D, P, R = 10, 4, 3, 2            # table rows, row length, partitions, indices per partition


def _program(*, scatter=None, oob_mode="error", dtype="float32"):
    """idx [P * R] -> index tile; gather table rows into SBUF and store them to `out`; then
    (scatter='write' or 'add') put the rows back at the same indices."""
    b = ProgramBuilder("trn2")
    tab = b.hbm("tab", (V * D,), dtype)
    idx = b.hbm("idx", (P * R,), "int32")
    out = b.hbm("out", (P * R * D,), dtype)
    it, rows = b.sbuf("it", (P, R), "int32"), b.sbuf("rows", (P, R * D), dtype)
    b.dma_copy(it, AccessPattern(idx, 0, P, 0, ((R, 1),), R))
    table = IndirectPattern(tab, 0, P, 0, ((R, 0), (D, 1)), 0, scale=D, bound=V)
    b.dma_copy(rows, table, index=it, dge="swdge", oob_mode=oob_mode)
    b.dma_copy(AccessPattern(out, 0, P, 0, ((R * D, 1),), R * D), rows)
    if scatter:
        b.dma_copy(table, rows, index=it, dge="swdge", oob_mode=oob_mode,
                   dst_rmw_op="add" if scatter == "add" else None)
    return b.build()


TABLE = np.arange(V * D, dtype=np.float32).reshape(V, D) / 8
REPEATED = np.array([3, 3, 0, 9, 3, 1], np.int32)      # row 3 three times


def test_gather_reads_the_rows_the_indices_name():
    res = execute(_program(), {"tab": TABLE.ravel(), "idx": REPEATED})
    np.testing.assert_array_equal(res["out"].reshape(-1, D), TABLE[REPEATED])


def test_scatter_add_adds_repeated_indices_up():
    res = execute(_program(scatter="add"), {"tab": TABLE.ravel(), "idx": REPEATED})
    want = TABLE.copy()
    np.add.at(want, REPEATED, TABLE[REPEATED])
    np.testing.assert_array_equal(res["tab"].reshape(V, D), want)


def test_scatter_writes_or_adds_the_rows_at_their_indices():
    idx = np.array([5, 2, 7, 0, 9, 1], np.int32)
    res = execute(_program(scatter="add"), {"tab": TABLE.ravel(), "idx": idx})
    want = TABLE.copy()
    want[idx] *= 2
    np.testing.assert_array_equal(res["tab"].reshape(V, D), want)
    res = execute(_program(scatter="write"), {"tab": TABLE.ravel(), "idx": idx})
    np.testing.assert_array_equal(res["tab"].reshape(V, D), TABLE)     # rows put back


def test_an_index_out_of_bounds_is_an_error_or_skipped():
    bad = np.array([3, 3, 0, V, 3, -1], np.int32)
    with pytest.raises(ProgramError, match=r"index 10 \(partition 1, position 1 of the index "
                                           r"tile 'it'\) is outside \[0, 10\) of 'tab'.*skip"):
        execute(_program(), {"tab": TABLE.ravel(), "idx": bad})
    res = execute(_program(oob_mode="skip"), {"tab": TABLE.ravel(), "idx": bad})
    got = res["out"].reshape(-1, D)
    np.testing.assert_array_equal(got[[0, 1, 2, 4]], TABLE[bad[[0, 1, 2, 4]]])
    np.testing.assert_array_equal(got[[3, 5]], 0)            # skipped: left as they were


def test_refusals_name_what_to_do():
    b = ProgramBuilder("trn2")
    tab = b.hbm("tab", (V * D,), "float32")
    it, rows = b.sbuf("it", (P, R), "int32"), b.sbuf("rows", (P, R * D), "float32")
    table = IndirectPattern(tab, 0, P, 0, ((R, 0), (D, 1)), 0, scale=D, bound=V)
    with pytest.raises(CapabilityError, match="swdge"):
        b.dma_copy(rows, table, index=it, dge="hwdge")
    with pytest.raises(ProgramError, match="takes an index tile"):
        b.dma_copy(rows, table, dge="swdge")
    with pytest.raises(FreeSizeError, match="one per row"):
        b.dma_copy(rows, table, index=b.sbuf("i1", (P, 1), "int32"), dge="swdge")
    with pytest.raises(CapabilityError, match="oob_mode 'error' only"):
        b.dma_copy(table, rows, index=it, dge="swdge", dst_rmw_op="add", oob_mode="skip")
    with pytest.raises(CapabilityError, match="dst_rmw_op"):
        b.dma_copy(table, rows, index=it, dge="swdge", dst_rmw_op="multiply")


def test_cost_is_one_descriptor_per_index_and_a_whole_table_footprint():
    prog = _program(scatter="add")
    gather, rmw = prog.emits[1], prog.emits[3]
    assert gather.dma.descriptors == P * R and rmw.dma.descriptors == P * R
    assert rmw.dma.hbm_bytes == 2 * gather.dma.hbm_bytes        # reads dst, then writes it
    assert gather.reads[0].box() == (0, 1, 0, V * D)             # addresses unknown: all rows
    # the gather waits for its index tile; the scatter-add for the gather's read of the table
    deps = [set(prog.dep_idx[prog.dep_ptr[i]:prog.dep_ptr[i + 1]].tolist()) for i in range(4)]
    assert 0 in deps[1] and {0, 1} <= deps[3]
