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


def test_legacy_index_expressions_and_ds():
    def body():
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        i_p, i_f = nl.mgrid[0:128, 0:512]
        ar = nl.arange(64)[None, :]
        return dict(mg=t[i_p, i_f].shape, ar=t[:, 64 + ar].offset, ds=t[:, nl.ds(128, 256)].shape)

    r = run(body)
    assert r["mg"] == (128, 512) and r["ar"] == 64 and r["ds"] == (128, 256)


def test_tile_size_follows_target():
    seen = {}

    def body():
        seen["fmax"] = nl.tile_size.gemm_moving_fmax
        seen["pmax"] = nl.tile_size.pmax
        return {}

    run(body)
    assert seen == {"fmax": 512, "pmax": 128}
