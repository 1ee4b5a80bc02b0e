"""NkiTensor views follow the NKI language guide: shapes, strides, offsets, partition rules."""

import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def run(body, *args, **kw):
    """Run ``body`` as a kernel; return what it returns (a dict of Python values)."""
    box = {}

    @nki.jit(platform_target="trn2")
    def k(*a):
        box.update(body(*a))
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        nisa.dma_copy(dst=out, src=t)
        return out

    nki.simulate(k, **kw)(*args)
    return box


def test_indexing_rules_of_the_language_guide():
    def body():
        t = nl.ndarray((64, 64, 64), dtype=nl.float32, buffer=nl.sbuf)
        h = nl.ndarray((4, 128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        return dict(
            contiguous=(nl.ndarray((128, 64), nl.float32, nl.sbuf).strides, 0),
            a=t[0, 0, 10].shape, b=t[:, 0].shape, c=t[:, 0, 10].shape, d=t[:, :, ::2].shape,
            e=t[0, ..., :].shape, f=t[...].shape, hbm=h[0, :, :].shape,
            sliced_offset=t[:, 3:5, 1].offset, perm=t.permute((0, 2, 1)).strides,
            reshape=t.reshape((64, 4096)).shape, pstart=t[32:64].partition_start)

    r = run(body)
    assert r["contiguous"][0] == (64, 1)
    assert r["a"] == (1, 1) and r["b"] == (64, 64) and r["c"] == (64, 1) and r["d"] == (64, 64, 32)
    assert r["e"] == (1, 64, 64) and r["f"] == (64, 64, 64) and r["hbm"] == (128, 32)
    assert r["sliced_offset"] == 3 * 64 + 1 and r["perm"] == (4096, 1, 64)
    assert r["reshape"] == (64, 4096) and r["pstart"] == 32


def test_strided_partition_slice_is_rejected():
    def body():
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        t[::2]
        return {}

    with pytest.raises(nki.NkiValidationError, match="partition"):
        run(body)


@pytest.mark.parametrize("index", [lambda t: t[0:200], lambda t: t[:, 4:12],
                                   lambda t: t[nl.ds(120, 16)]])
def test_slice_past_a_dimension_is_rejected_not_clamped(index):
    # Python's slice.indices clamps t[0:200] of 128 partitions to t[0:128]: a kernel written
    # for a larger tile would run on part of it, silently
    def body():
        index(nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf))
        return {}

    with pytest.raises(nki.NkiValidationError, match="out of range for dimension"):
        run(body)


def test_legacy_index_expressions_and_ds():
    def body():
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        i_p, i_f = nl.mgrid[0:128, 0:512]
        ar = nl.arange(64)[None, :]
        return dict(mg=t[i_p, i_f].shape, ar=t[:, 64 + ar].offset, ds=t[:, nl.ds(128, 256)].shape)

    r = run(body)
    assert r["mg"] == (128, 512) and r["ar"] == 64 and r["ds"] == (128, 256)



def test_shaped_arange_with_an_integer_keeps_numpy_shape():
    """nl.arange(n)[:, None] is a column of a 2-D index, as NumPy broadcasts it: ids[i_p, 0] is
    a [P, 1] tile (P partitions), ids[0, i_f] with a row arange is [1, F]. An integer used to
    drop the HBM dimension, so nl.load made a one-partition vector of a strided column and
    raised "reshape needs ids to be contiguous"."""
    import numpy as np

    @nki.jit(platform_target="trn2")
    def first_column_and_row(ids):
        col = nl.ndarray((128, 1), dtype=ids.dtype, buffer=nl.shared_hbm)
        row = nl.ndarray((1, 4), dtype=ids.dtype, buffer=nl.shared_hbm)
        c = nl.load(ids[nl.arange(128)[:, None], 0])
        r = nl.load(ids[0, nl.arange(4)[None, :]])
        assert c.shape == (128, 1) and r.shape == (1, 4)
        nl.store(col, value=c)
        nl.store(row, value=r)
        return col, row

    ids = np.arange(128 * 4, dtype=np.int32).reshape(128, 4)
    col, row = nki.simulate(first_column_and_row)(ids)
    np.testing.assert_array_equal(col, ids[np.arange(128)[:, None], 0])
    np.testing.assert_array_equal(row, ids[0, np.arange(4)[None, :]])

def test_tile_size_follows_target():
    seen = {}

    def body():
        seen["fmax"] = nl.tile_size.gemm_moving_fmax
        seen["pmax"] = nl.tile_size.pmax
        return {}

    run(body)
    assert seen == {"fmax": 512, "pmax": 128}


@pytest.mark.parametrize("pieces", [8, 7])
def test_large_tile_written_piece_by_piece(pieces):
    """A tile larger than the whole-mask check (2M elements) filled by 8 DMAs is fully written
    once the last piece lands (its readers no longer look at the mask); with a piece missing,
    a read of the whole tile is still an uninitialised read."""
    import numpy as np
    from neuron_sim.nki.tensor import _WHOLE_CHECK_ELEMS

    def body(src):
        t = nl.ndarray((128, 8, 2048), dtype=nl.bfloat16, buffer=nl.sbuf)
        for k in range(pieces):
            nisa.dma_copy(dst=t[:, k, :], src=src[k * 128:(k + 1) * 128, :])
        st = t.storage
        state = st.written if isinstance(st.written, str) else "partial"
        u = nl.ndarray((128, 8, 2048), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=t)
        return dict(state=state, big=st.shape[0] * 8 * 2048 > _WHOLE_CHECK_ELEMS)

    src = np.zeros((1024, 2048), nl.bfloat16)
    if pieces == 8:
        r = run(body, src, numerics=False)
        assert r == dict(state="all", big=True)
    else:
        with pytest.raises(nki.NkiUninitializedReadError, match="reads 262144 of 2097152 elements"):
            run(body, src, numerics=False)


def test_aliasing_view_write_stops_the_count():
    """A view naming an element twice (stride 0) cannot be counted: the tile stays a mask and
    the unwritten part is still found."""
    from neuron_sim.nki.tensor import _aliases

    assert _aliases((4, 3), (0, 1)) and _aliases((2, 2), (1, 1))
    assert not _aliases((128, 8, 512), (4096, 512, 1)) and not _aliases((2, 3), (2, 3))

    def body():
        t = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf)     # 2M elements
        nisa.memset(dst=t[:, 0:1].broadcast(1, 3), value=0.0)     # writes column 0 three times
        nisa.memset(dst=t[:, 1:16384], value=0.0)
        st = t.storage
        return dict(count=st.n_written, state=st.written if isinstance(st.written, str) else "partial")

    assert run(body) == dict(count=-1, state="partial")


def test_written_state_kept_as_boxes_equals_the_element_mask():
    """Writes of whole rows x a column interval are kept as boxes (no element mask) while they
    stay apart; any other write, an overlap or a read of the mask turns them into the mask.
    Random writes on SBUF and HBM tensors: the state read back equals an element mask written
    through the same views, after every prefix of the writes."""
    import numpy as np
    from neuron_sim.nki import tracer
    from neuron_sim.nki.target import get_target
    from neuron_sim.nki.tensor import NkiTensor

    rng = np.random.default_rng(1)

    def random_view(t):
        R, F = t.shape[0], t.shape[1] * t.shape[2]
        r0 = int(rng.integers(0, R))
        r1 = int(rng.integers(r0 + 1, R + 1))
        kind = rng.integers(0, 4)
        if kind == 0:                                  # a box: rows x one middle index
            v = t[r0:r1, int(rng.integers(0, t.shape[1])), :]
        elif kind == 1:                                # a box: rows x a column interval
            c0 = int(rng.integers(0, F))
            v = t.reshape((R, F))[r0:r1, c0:int(rng.integers(c0 + 1, F + 1))]
        elif kind == 2:                                # strided columns: not a box
            v = t[r0:r1, :, 0:t.shape[2]:2]
        else:                                          # two column intervals: not a box
            v = t[r0:r1, 1:3, 2:5]
        return v.shape, v.strides, v.offset

    tr = tracer.KernelTrace(target=get_target("trn2"), numerics=False)
    seen = set()
    for trial in range(60):
        buffer = ("sbuf", "shared_hbm")[trial % 2]
        writes = None
        for n in range(1, 7):
            t = NkiTensor(tr.new_storage(buffer, (16, 4, 8), "float32", loc=("test", 0)))
            writes = writes or [random_view(t) for _ in range(6)]
            ref = np.zeros(t.shape, bool)
            for shape, strides, offset in writes[:n]:
                NkiTensor(t.storage, shape, strides, offset).mark_written()
                np.lib.stride_tricks.as_strided(ref.reshape(-1)[offset:], shape,
                                                [s * ref.itemsize for s in strides])[...] = True
            seen.add(t.storage.written if isinstance(t.storage.written, str) else "mask")
            assert t.fully_written() == ref.all() and not t.nothing_written()
            np.testing.assert_array_equal(t.written_mask(), ref)
    assert {"boxes", "mask"} <= seen
    # overlapping boxes whose sizes add up to the whole tensor do not fill it
    t = NkiTensor(tr.new_storage("sbuf", (16, 32), "float32", loc=("test", 0)))
    t[:, 0:16].mark_written()
    t[:, 8:24].mark_written()
    assert not t.fully_written() and t.written_mask().sum() == 16 * 24


def test_indexing_a_new_tile_like_the_last_one_gives_the_same_views():
    """__getitem__ keeps the views an index gave by the geometry of the indexed view (a loop's
    new tile is sliced as the last one was): random indices on fresh SBUF and HBM tensors give
    the view a fresh computation gives, errors included."""
    import numpy as np
    from neuron_sim.nki import tracer
    from neuron_sim.nki.target import get_target
    from neuron_sim.nki.tensor import NkiTensor

    rng = np.random.default_rng(3)
    tr = tracer.KernelTrace(target=get_target("trn2"), numerics=False)

    def index(n):
        k = int(rng.integers(0, 3))
        if k == 0:
            return int(rng.integers(-n, n + 1))
        a, b = sorted(int(x) for x in rng.integers(0, n + 2, 2))
        return slice(a, b, int(rng.integers(1, 3))) if k == 1 else slice(a, None)

    for trial in range(400):
        buffer = ("sbuf", "hbm")[trial % 2]
        key = tuple(index(n) for n in (32, 6, 5))[:int(rng.integers(1, 4))]
        p0, c0 = int(rng.integers(0, 3)), int(rng.integers(0, 3))   # the indexed view's offset
        got = []
        for _ in range(2):                      # the second tile hits the kept geometry
            t = NkiTensor(tr.new_storage(buffer, (64, 6, 10), "float32", loc=("test", 0)))
            try:
                v = t[p0:p0 + 32, :, c0:c0 + 5][key]
                got.append((v.shape, v.strides, v.offset, v.storage is t.storage))
            except nki.NkiValidationError as e:
                got.append(str(e).replace(t.name, "T"))
        fresh = NkiTensor(tr.new_storage(buffer, (64, 6, 10), "float32", loc=("test", 0)))
        try:
            v = fresh[p0:p0 + 32, :, c0:c0 + 5]._index(key)
            want = (v.shape, v.strides, v.offset, True)
        except nki.NkiValidationError as e:
            want = str(e).replace(fresh.name, "T")
        assert got == [want, want], key
