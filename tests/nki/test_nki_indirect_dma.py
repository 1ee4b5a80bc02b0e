"""Indirect DMA in NKI kernels: `table[idx_tile, ...]` (an HBM tensor indexed by an SBUF
integer tile) as nisa.dma_copy's src gathers rows, as its dst (dst_rmw_op=nl.add) scatter-adds
them; nl.load/nl.store take the same views. Values against NumPy, the built program against the
trace (debug mode), the simulated time, and the errors, each naming the kernel's line."""

import inspect

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim.nki.errors import NkiValidationError

V, D, P = 300, 64, 128          # table rows, row length, indices per tile
RNG = np.random.default_rng(7)
TABLE = RNG.standard_normal((V, D)).astype(np.float32)
IDS = RNG.integers(0, V, (2 * P, 1)).astype(np.int32)          # two index tiles, repeats


@nki.jit(platform_target="trn2")
def embedding(table, ids):
    out = nl.ndarray((ids.shape[0], table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(ids.shape[0] // P):
        idx = nl.ndarray((P, 1), dtype=ids.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=ids[t * P:(t + 1) * P, :])
        rows = nl.ndarray((P, table.shape[1]), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=rows, src=table[idx, :])
        nisa.dma_copy(dst=out[t * P:(t + 1) * P, :], src=rows)
    return out


@nki.jit(platform_target="trn2")
def embedding_load(table, ids):
    out = nl.ndarray((P, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(P)[:, None], nl.arange(table.shape[1])[None, :]
    idx = nl.load(ids[i_p, nl.arange(1)[None, :]])
    nl.store(out[i_p, i_f], value=nl.load(table[idx, i_f]))
    return out


@nki.jit(platform_target="trn2")
def scatter_add(table, ids, grads):
    """out = table, then out[ids[k]] += grads[k] for every k (repeated ids add up)."""
    out = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=table)
    for t in nl.affine_range(ids.shape[0] // P):
        idx = nl.ndarray((P, 1), dtype=ids.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=ids[t * P:(t + 1) * P, :])
        g = nl.ndarray((P, table.shape[1]), dtype=grads.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=g, src=grads[t * P:(t + 1) * P, :])
        nisa.dma_copy(dst=out[idx, :], src=g, dst_rmw_op=nl.add)
    return out


def test_embedding_gather_reads_the_rows_the_indices_name():
    got = nki.simulate(embedding, check_semantics=True)(TABLE, IDS)
    np.testing.assert_array_equal(got, TABLE[IDS[:, 0]])
    rep = nki.last_report()
    assert rep.total_ns > 0
    gathers = [r for r in rep.instruction_times(op="dma_copy") if r.loc[1] == _line(
        embedding, "src=table[idx, :]")]
    assert len(gathers) == 2 and all(r.end_ns > r.start_ns for r in gathers)
    got = nki.simulate(embedding_load, check_semantics=True)(TABLE, IDS[:P])
    np.testing.assert_array_equal(got, TABLE[IDS[:P, 0]])


def test_scatter_add_adds_repeated_indices_up():
    grads = RNG.standard_normal((2 * P, D)).astype(np.float32)
    got = nki.simulate(scatter_add, check_semantics=True)(TABLE, IDS, grads)
    want = TABLE.copy()
    np.add.at(want, IDS[:, 0], grads)
    assert len(np.unique(IDS)) < len(IDS)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    rep = nki.last_report()
    assert rep.total_ns > 0
    rows = rep.instruction_times(op="dma_copy")
    copy, adds = rows[0], [r for r in rows if r.loc[1] == _line(scatter_add, "dst_rmw_op")]
    # the whole table is the scatter's footprint: it waits for the copy into out
    assert len(adds) == 2 and all(r.start_ns >= copy.end_ns for r in adds)


def _line(kernel, text):
    """The line of `kernel`'s source that holds `text`."""
    lines, first = inspect.getsourcelines(kernel.func if hasattr(kernel, "func") else kernel)
    return first + next(i for i, s in enumerate(lines) if text in s)


def test_an_index_out_of_range_raises_at_the_kernel_line():
    bad = IDS[:P].copy()
    bad[5, 0] = V
    with pytest.raises(NkiValidationError, match=r"index 300 \(partition 5.*outside \[0, 300\)"
                       ) as e:
        nki.simulate(embedding)(TABLE, bad)
    assert e.value.loc == (__file__, _line(embedding, "src=table[idx, :]"))
    got = _gather(TABLE, bad, lambda tab, ids: tab[_loaded(ids), :],
                  oob_mode=nisa.oob_mode.skip, fill=True)
    want = TABLE[np.minimum(bad[:, 0], V - 1)]
    want[5] = 0                                 # skipped: the row keeps what it held
    np.testing.assert_array_equal(got, want)


def _gather(table, ids, make_index, fill=False, **dma):
    """A kernel gathering table[index, :] for the index tile make_index(ids) returns (into a
    tile of zeros: `fill`)."""
    @nki.jit(platform_target="trn2")
    def k(table, ids):
        out = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.shared_hbm)
        rows = nl.ndarray((P, D), dtype=table.dtype, buffer=nl.sbuf)
        if fill:
            nisa.memset(dst=rows, value=0.0)
        nisa.dma_copy(dst=rows, src=make_index(table, ids), **dma)
        nisa.dma_copy(dst=out, src=rows)
        return out
    return nki.simulate(k, check_semantics=fill)(table, ids)


def _loaded(ids, dtype=None, shape=None):
    idx = nl.ndarray(shape or ids.shape, dtype=dtype or ids.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=ids.reshape(idx.shape) if shape else ids)
    return idx


@pytest.mark.parametrize("make, match", [
    (lambda tab, ids: tab[ids, :], "index tile must be in SBUF"),
    (lambda tab, ids: tab[_loaded(ids, nl.float32), :], "must hold integers"),
    (lambda tab, ids: tab[_loaded(ids, shape=(P, 1, 1)), :], "must be 2-D"),
    (lambda tab, ids: tab[:, _loaded(ids)], "first dimension only"),
    (lambda tab, ids: _loaded(ids)[_loaded(ids), :], "only an HBM tensor"),
])
def test_a_wrong_index_tile_is_refused_at_the_kernel_line(make, match):
    with pytest.raises(NkiValidationError, match=match) as e:
        _gather(TABLE, IDS[:P], make)
    assert e.value.loc[0] == __file__


def test_an_indirect_dma_takes_software_dge_only():
    with pytest.raises(NkiValidationError, match="swdge") as e:
        _gather(TABLE, IDS[:P], lambda tab, ids: tab[_loaded(ids), :],
                dge_mode=nisa.dge_mode.hwdge)
    assert e.value.loc[0] == __file__


def test_a_direct_read_modify_write_is_built_as_one():
    """dst_rmw_op without an index: the program adds too (it was built as a plain copy, which
    the debug mode caught), and reads dst's bytes as well (was: timed as a copy)."""
    @nki.jit(platform_target="trn2")
    def add_into(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=x, src=b, dst_rmw_op=nl.add)
        nisa.dma_copy(dst=out, src=x)
        return out

    a, b = TABLE[:P], TABLE[P:2 * P]
    np.testing.assert_array_equal(nki.simulate(add_into, check_semantics=True)(a, b), a + b)
