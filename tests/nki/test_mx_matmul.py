"""MX matmul from an NKI kernel on Trn3 (NeuronCore-v4), as AWS's "MXFP Matrix Multiplication with
NKI" deep dive writes it: BF16 tiles in the interleaved SBUF layout are quantized by
nisa.quantize_mx into x4-packed MXFP8 data and E8M0 scales, nisa.nc_matmul_mx multiplies them into
PSUM, and the result is copied out. Numerics against a NumPy MX reference written here; time
against the BF16 nc_matmul; the documented errors (NeuronCore-v4 only, dtype and tile rules)."""

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim.explorer import summarize_result
from neuron_sim.errors import CapabilityError, DtypeError, FreeSizeError, PartitionError
from neuron_sim.nki.errors import NkiValidationError

EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15}       # exponent of the largest normal (OCP MX)


# ---- the NumPy reference: MX quantization of [P, F, 4] tiles and the MX matmul --------------
def mx_quantize(x, elem):
    """x [P, F, 4] FP32 -> (values [P, F, 4] in `elem`, scale codes [P/8, F]). Groups are 8
    partitions x 4 values; the scale is 2^(floor(log2(amax)) - emax + 1): twice the OCP sample
    conversion's, as AWS documents quantize_mx."""
    p, f, _ = x.shape
    g = x.reshape(p // 8, 8, f, 4)
    amax = np.abs(g).max(axis=(1, 3))
    e = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - EMAX[elem] + 1
    e = np.where(amax > 0, e, -127)
    scale = np.exp2(e)[:, None, :, None]
    vals = (g / scale).astype(getattr(ml_dtypes, elem)).astype(np.float64) * scale
    return vals.reshape(p, f, 4), (e + 127).astype(np.uint8)


def mx_matmul(st, mv, elem_st, elem_mv):
    """stationary [K, M, 4], moving [K, N, 4] -> [M, N]: quantize both, contract over the
    partitions and the 4 packed values (FP64)."""
    s, _ = mx_quantize(st, elem_st)
    m, _ = mx_quantize(mv, elem_mv)
    return np.einsum("kiq,kjq->ij", s, m)


# ---- the kernel, as the deep dive writes it -----------------------------------------------------
def quantize_matmul(st_hbm, mv_hbm, mx_dtype, out_dtype, scales_out=False):
    """st_hbm [K, 4M], mv_hbm [K, 4N] BF16 in the interleaved layout -> [M, N] (and the moving
    tile's scale tile when scales_out)."""
    K, FS = st_hbm.shape
    FM = mv_hbm.shape[1]
    st = nl.ndarray((K, FS), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=st_hbm)
    mv = nl.ndarray((K, FM), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=mv, src=mv_hbm)
    tiles = []
    for src in (st, mv):
        P, F = src.shape
        data = nl.ndarray((P, F // 4), dtype=mx_dtype, buffer=nl.sbuf)
        # scales: P//8 partitions fit one quadrant; beyond 32 partitions the tile spans them all
        scale = nl.ndarray((P // 8 if P <= 32 else P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=data, src=src, dst_scale=scale)
        tiles.append((data, scale))
    (sq, ss), (mq, ms) = tiles
    acc = nl.ndarray((FS // 4, FM // 4), dtype=out_dtype, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=sq, moving=mq, stationary_scale=ss, moving_scale=ms)
    res = nl.ndarray(acc.shape, dtype=out_dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray(acc.shape, dtype=out_dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    if not scales_out:
        return out
    sc = nl.ndarray(ms.shape, dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=sc, src=ms)
    return out, sc


def _inputs(k, m, n, seed=0):
    rng = np.random.default_rng(seed)
    st = (rng.standard_normal((k, 4 * m)) * rng.uniform(0.01, 100, (k, 1))).astype(ml_dtypes.bfloat16)
    mv = rng.standard_normal((k, 4 * n)).astype(ml_dtypes.bfloat16)
    return st, mv


def _run(target, st, mv, mx_dtype=nl.float8_e4m3fn_x4, out_dtype=nl.float32, **kw):
    kern = nki.jit(quantize_matmul, platform_target=target)
    return nki.simulate(kern, **kw)(st, mv, mx_dtype, out_dtype)


def test_nl_declares_the_x4_mx_types_and_e8m0():
    """float8_*_x4 are 32-bit elements of four FP8 values, float4_e2m1fn_x4 a 16-bit one of four
    FP4 values [nki.language]; a [128, 512] x4 tile takes 512 x 4 bytes per partition."""
    assert (nl.float8_e4m3fn_x4.itemsize, nl.float8_e5m2_x4.itemsize,
            nl.float4_e2m1fn_x4.itemsize) == (4, 4, 2)
    assert str(nl.float8_e4m3fn_x4) == "float8_e4m3fn_x4"
    assert nl.float8_e8m0fnu == np.dtype(ml_dtypes.float8_e8m0fnu)

    def k(x):
        t = nl.ndarray((128, 512), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
        assert t.storage.bytes_per_partition == 1024 and t.dtype == nl.float4_e2m1fn_x4
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out

    nki.simulate(nki.jit(k, platform_target="trn3"))(np.zeros((2, 2), np.float32))


@pytest.mark.parametrize("mx_dtype, elem", [(nl.float8_e4m3fn_x4, "float8_e4m3fn"),
                                            (nl.float8_e5m2_x4, "float8_e5m2")])
def test_quantize_then_mx_matmul_matches_the_numpy_mx_reference(mx_dtype, elem):
    """[512, 128] x [512, 512] (K interleaved as [128 partitions, 4 values]): the FP32 PSUM result
    equals the NumPy MX reference to FP32 accumulation error (1e-5 of the largest output), and
    is within the MX format's error of the exact BF16 product."""
    st, mv = _inputs(128, 128, 512)
    out = _run("trn3", st, mv, mx_dtype)
    st4 = st.astype(np.float32).reshape(128, 128, 4)
    mv4 = mv.astype(np.float32).reshape(128, 512, 4)
    ref = mx_matmul(st4, mv4, elem, elem)
    big = np.abs(ref).max()
    assert np.abs(out - ref).max() <= 1e-5 * big
    exact = np.einsum("kiq,kjq->ij", st4.astype(np.float64), mv4)
    err = np.abs(out - exact).max() / np.abs(exact).max()
    assert err < {"float8_e4m3fn": 0.05, "float8_e5m2": 0.1}[elem], err


def test_bf16_psum_output_and_one_quadrant_tiles():
    """K = 32 partitions (scales in 4 partitions) and a BF16 PSUM tile: the result is the MX
    reference rounded to BF16."""
    st, mv = _inputs(32, 64, 256, seed=1)
    out = _run("trn3", st, mv, out_dtype=nl.bfloat16)
    ref = mx_matmul(st.astype(np.float32).reshape(32, 64, 4),
                    mv.astype(np.float32).reshape(32, 256, 4), "float8_e4m3fn", "float8_e4m3fn")
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2 ** -8, atol=1e-6 * np.abs(ref).max())


def test_scales_sit_in_the_quadrant_of_their_group():
    """quantize_mx writes the scales of each 32-partition quadrant into the first 4 partitions of
    that quadrant: group g (data partitions 8g..8g+7) -> scale partition 32*(g//4) + g%4."""
    st, mv = _inputs(128, 8, 64, seed=2)
    kern = nki.jit(quantize_matmul, platform_target="trn3")
    _, sc = nki.simulate(kern)(st, mv, nl.float8_e4m3fn_x4, nl.float32, True)
    _, codes = mx_quantize(mv.astype(np.float32).reshape(128, 64, 4), "float8_e4m3fn")
    rows = [32 * (g // 4) + g % 4 for g in range(16)]
    np.testing.assert_array_equal(sc[rows], codes)


def test_the_interpreter_replays_the_kernel_bit_for_bit():
    """check_semantics=True runs the built program through the ISA modules' semantics (the
    interpreter keeps x4 tiles as [..., 4] element arrays; the kernel packs them in words)."""
    st, mv = _inputs(64, 32, 128, seed=3)
    out = _run("trn3", st, mv, check_semantics=True)
    assert np.isfinite(out).all()


def test_accumulate_none_adds_where_psum_was_written():
    """Two nc_matmul_mx into one PSUM tile, accumulate left at None: the second adds (K = 1024)."""
    st, mv = _inputs(128, 64, 128, seed=4)
    st2, mv2 = _inputs(128, 64, 128, seed=5)

    def k(a, b, c, d):
        acc = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
        for s_hbm, m_hbm in ((a, b), (c, d)):
            q = []
            for x in (s_hbm, m_hbm):
                t = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x)
                data = nl.ndarray((128, x.shape[1] // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
                scale = nl.ndarray((128, x.shape[1] // 4), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
                nisa.quantize_mx(dst=data, src=t, dst_scale=scale)
                q.append((data, scale))
            nisa.nc_matmul_mx(acc, q[0][0], q[1][0], q[0][1], q[1][1])
        res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    out = nki.simulate(nki.jit(k, platform_target="trn3"))(st, mv, st2, mv2)
    f = lambda x, n: x.astype(np.float32).reshape(128, n, 4)   # noqa: E731
    ref = mx_matmul(f(st, 64), f(mv, 128), "float8_e4m3fn", "float8_e4m3fn") + \
        mx_matmul(f(st2, 64), f(mv2, 128), "float8_e4m3fn", "float8_e4m3fn")
    assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()


TILES = 32


def test_mx_matmul_is_4x_the_bf16_rate_on_trn3():
    """[128, 128] x4 stationary x [128, 512] x4 moving (K = 512) takes the TensorE interval of one
    BF16 [128, 128] x [128, 512] matmul (K = 128): 4x the FLOPs per ns [ArchV4]. Over 32 tiles
    (K = 512 each: 32 MX or 128 BF16 matmuls) the TensorE busy time is 4x shorter once the dI/dt
    throttle has ramped (3 us), 3.5-4x counting the ramp, which weighs more on the shorter run.
    HFU counts an MX FLOP as 0.25 BF16 FLOPs [Explorer]."""
    def kern(a, b, mx):
        st = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=a)
        mv = nl.ndarray(b.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=mv, src=b)
        if mx:
            sq = nl.ndarray((128, 128), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
            ss = nl.ndarray((128, 128), dtype=nl.uint8, buffer=nl.sbuf)
            mq = nl.ndarray((128, 512), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
            ms = nl.ndarray((128, 512), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.quantize_mx(dst=sq, src=st, dst_scale=ss)
            nisa.quantize_mx(dst=mq, src=mv, dst_scale=ms)
        out = nl.ndarray((128, TILES * 512), dtype=nl.float32, buffer=nl.shared_hbm)
        for t in range(TILES):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            if mx:
                nisa.nc_matmul_mx(dst=acc, stationary=sq, moving=mq, stationary_scale=ss,
                                  moving_scale=ms)
            else:               # the same K = 512 as 4 BF16 matmuls
                for k in range(4):
                    nisa.nc_matmul(dst=acc, stationary=st[:, k * 128:(k + 1) * 128],
                                   moving=mv[:, k * 512:(k + 1) * 512])
            res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[:, t * 512:(t + 1) * 512], src=res)
        return out

    st, mv = _inputs(128, 128, 512, seed=6)
    rows = {}
    for mx in (True, False):
        nki.simulate(nki.jit(kern, platform_target="trn3"), numerics=False)(st, mv, mx)
        rep = nki.last_report()
        rows[mx] = [r for r in rep.instruction_times() if r.kind == "multiply_moving"]
        # HFU weighs an MX FLOP 0.25 as the profiler does: never above the PE array's busy share
        assert 0 < rep.hfu_percent <= rep.engine_active_percent["TensorE"], (mx, rep.hfu_percent)
        # the explorer's summary of the same program reads the same HFU
        res = rep.timing[0]
        assert summarize_result(res).hfu == pytest.approx(res.summary["hfu"], rel=1e-12)
    assert (len(rows[True]), len(rows[False])) == (TILES, 4 * TILES)
    assert rows[True][0].ii_ns == rows[False][0].ii_ns == pytest.approx(512 / 2.4)
    flops = {True: 2 * 512 * 128 * 512, False: 2 * 128 * 128 * 512}

    def rate(mx, after_ns=0.0):
        r = [x for x in rows[mx] if x.start_ns >= rows[mx][0].start_ns + after_ns]
        return len(r) * flops[mx] / sum(x.busy_ns for x in r)

    ramp_ns = 3000.0                    # tensor_didt_ramp_s of Trn3
    assert rate(True, ramp_ns) / rate(False, ramp_ns) == pytest.approx(4.0, rel=0.01)
    assert 3.5 <= rate(True) / rate(False) <= 4.0


def test_trn2_raises_the_neuroncore_v4_capability_error():
    st, mv = _inputs(128, 8, 64)
    with pytest.raises(NkiValidationError) as e:
        _run("trn2", st, mv)
    assert isinstance(e.value.__cause__, CapabilityError)
    msg = str(e.value)
    assert "nisa.quantize_mx" in msg and "NeuronCore-v4 or newer" in msg and "NeuronCore-v3" in msg
    assert "test_mx_matmul.py" in msg


def _one_call(call):
    """Run `call(tiles)` in a trn3 kernel over freshly written tiles; return the error."""
    def k(x):
        call()
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out
    with pytest.raises(NkiValidationError) as e:
        nki.simulate(nki.jit(k, platform_target="trn3"), numerics=False)(np.zeros((1, 1), np.float32))
    return e.value


def _tile(shape, dtype, buffer=nl.sbuf):
    t = nl.ndarray(shape, dtype=dtype, buffer=buffer)
    t.mark_written()
    return t


def _quantize(dst, src, dst_scale):
    """A quantize_mx call on written tiles, each given as (shape, dtype)."""
    return lambda: nisa.quantize_mx(dst=_tile(*dst), src=_tile(*src), dst_scale=_tile(*dst_scale))


@pytest.mark.parametrize("call, error, words", [
    (_quantize(((128, 64), nl.float8_e4m3fn_x4), ((128, 256), nl.float32), ((128, 64), nl.uint8)),
     DtypeError, ["'src'", "('bfloat16', 'float16')", "float32"]),
    (_quantize(((128, 64), nl.float4_e2m1fn_x4), ((128, 256), nl.bfloat16), ((128, 64), nl.uint8)),
     DtypeError, ["'dst'", "float8_e4m3fn_x4", "float4_e2m1fn_x4"]),
    (_quantize(((16, 64), nl.float8_e4m3fn_x4), ((16, 256), nl.bfloat16), ((2, 64), nl.uint8)),
     PartitionError, ["a multiple of 32 partitions", "found 16"]),
    (_quantize(((128, 64), nl.float8_e4m3fn_x4), ((128, 256), nl.bfloat16), ((16, 64), nl.uint8)),
     PartitionError, ["'dst_scale'", "128 partitions", "found 16"]),
    (_quantize(((64, 32), nl.float8_e4m3fn_x4), ((64, 130), nl.bfloat16), ((64, 32), nl.uint8)),
     FreeSizeError, ["multiple of 4", "found 130"]),
    (lambda: nisa.nc_matmul_mx(_tile((128, 1024), nl.float32, nl.psum),
                               _tile((128, 128), nl.float8_e4m3fn_x4),
                               _tile((128, 1024), nl.float8_e4m3fn_x4),
                               _tile((128, 128), nl.uint8), _tile((128, 1024), nl.uint8)),
     FreeSizeError, ["'moving'", "<= 512", "found 1024"]),
    (lambda: nisa.nc_matmul_mx(_tile((128, 512), nl.float32, nl.psum),
                               _tile((128, 128), nl.bfloat16),
                               _tile((128, 512), nl.float8_e4m3fn_x4),
                               _tile((128, 128), nl.uint8), _tile((128, 512), nl.uint8)),
     DtypeError, ["'stationary'", "x4-packed", "bfloat16"]),
    (lambda: nisa.nc_matmul_mx(_tile((128, 512), nl.float32, nl.psum),
                               _tile((64, 128), nl.float8_e4m3fn_x4),
                               _tile((64, 512), nl.float8_e4m3fn_x4),
                               _tile((64, 128), nl.uint8), _tile((64, 512), nl.uint8),
                               tile_position=(0, 0), tile_size=(64, 64)),
     PartitionError, ["'tile_size'", "row tiling only", "(64, 64)"]),
])
def test_documented_limits_raise_errors_naming_them(call, error, words):
    err = _one_call(call)
    assert isinstance(err.__cause__, error), repr(err.__cause__)
    for w in words:
        assert w in str(err), (w, str(err))


def test_bf16_psum_takes_a_moving_tile_of_1024():
    """One PSUM bank holds 1024 BF16 per partition: the MX moving limit with a BF16 dst [ISA]."""
    def k(x):
        acc = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul_mx(acc, _tile((128, 128), nl.float8_e5m2_x4),
                          _tile((128, 1024), nl.float8_e4m3fn_x4), _tile((128, 128), nl.uint8),
                          _tile((128, 1024), nl.uint8))
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out
    nki.simulate(nki.jit(k, platform_target="trn3"), numerics=False)(np.zeros((1, 1), np.float32))


# ---- offline-quantized MX data, as the deep dive's first example loads it -----------------------
def offline_mx_matmul(st_words, st_scale, mv_words, mv_scale, st_dtype, mv_dtype):
    """MX data arrive as uint32 (FP8: 4 values a word) or uint8 (FP4: 2 values a byte) arrays,
    viewed as x4 types with .ap(dtype=...); the contiguous [K/8, F] scales are spread over the
    partition quadrants by DMA (4 rows into each)."""
    K, M, N = 128, st_scale.shape[1], mv_scale.shape[1]
    tiles = []
    for words, scale, dt, f in ((st_words, st_scale, st_dtype, M), (mv_words, mv_scale, mv_dtype, N)):
        data = nl.ndarray((K, f), dtype=dt, buffer=nl.sbuf)
        nisa.dma_copy(dst=data, src=words.ap(dtype=dt, pattern=[[f, K], [1, f]], offset=0))
        sc = nl.ndarray((K, f), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=sc, value=0)
        for q in range(K // 32):
            nisa.dma_copy(dst=sc.ap(pattern=[[f, 4], [1, f]], offset=32 * q * f),
                          src=scale.ap(pattern=[[f, 4], [1, f]], offset=4 * q * f))
        tiles.append((data, sc))
    return _mx_out(M, N, *tiles)


def _mx_out(M, N, st, mv):
    """Kernel helper: nc_matmul_mx of the (data, scale) pairs st and mv into PSUM, copied out to
    a new [M, N] BF16 HBM tensor."""
    acc = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st[0], moving=mv[0], stationary_scale=st[1],
                      moving_scale=mv[1])
    res = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def _mx_data(elem, f, seed):
    """Random MX values [128, f, 4] of `elem`, their host words, and random scale codes
    [16, f]."""
    rng = np.random.default_rng(seed)
    top = float(ml_dtypes.finfo(getattr(ml_dtypes, elem)).max)
    vals = (rng.uniform(-top, top, (128, f, 4))).astype(getattr(ml_dtypes, elem))
    codes = rng.integers(117, 127, (16, f)).astype(np.uint8)
    b = vals.view(np.uint8)
    words = b.view(np.uint32)[..., 0] if elem != "float4_e2m1fn" else \
        ((b[..., 0::2] & 15) | (b[..., 1::2] << 4)).reshape(128, 2 * f)
    deq = vals.astype(np.float64) * np.exp2(np.repeat(codes, 8, axis=0).astype(np.float64) - 127)[..., None]
    return words, codes, deq


@pytest.mark.parametrize("st_elem, mv_elem", [("float8_e5m2", "float8_e5m2"),
                                              ("float4_e2m1fn", "float4_e2m1fn"),
                                              ("float4_e2m1fn", "float8_e4m3fn")])
def test_offline_quantized_mx_data_viewed_with_ap_dtype(st_elem, mv_elem):
    """FP8 x FP8, FP4 x FP4 and mixed FP4 x FP8 MX tiles loaded from host words: the BF16 result
    is the dequantized product rounded to BF16; check_semantics replays it."""
    sw, sc, sd = _mx_data(st_elem, 128, 7)
    mw, mc, md = _mx_data(mv_elem, 512, 8)
    x4 = {"float8_e5m2": nl.float8_e5m2_x4, "float8_e4m3fn": nl.float8_e4m3fn_x4,
          "float4_e2m1fn": nl.float4_e2m1fn_x4}
    kern = nki.jit(offline_mx_matmul, platform_target="trn3")
    out = nki.simulate(kern, check_semantics=True)(sw, sc, mw, mc, x4[st_elem], x4[mv_elem])
    ref = np.einsum("kiq,kjq->ij", sd, md)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2 ** -8, atol=1e-6 * np.abs(ref).max())


def test_the_jit_kernel_takes_torch_words_as_aws_host_code_passes_them():
    """nki.jit called directly with CPU torch tensors (uint32 FP8 words, uint8 FP4 pairs, uint8
    scales) returns a torch BF16 tensor: the dequantized product within BF16 rounding."""
    torch = pytest.importorskip("torch", reason="the torch entry of nki.jit needs torch")
    sw, sc, sd = _mx_data("float8_e5m2", 128, 9)
    mw, mc, md = _mx_data("float4_e2m1fn", 512, 10)
    kern = nki.jit(offline_mx_matmul, platform_target="trn3")
    out = kern(*(torch.from_numpy(a) for a in (sw, sc, mw, mc)), nl.float8_e5m2_x4,
               nl.float4_e2m1fn_x4)
    assert out.dtype == torch.bfloat16
    ref = np.einsum("kiq,kjq->ij", sd, md)
    np.testing.assert_allclose(out.float().numpy(), ref, rtol=2 ** -8, atol=1e-6 * np.abs(ref).max())


def test_ap_dtype_reads_kernel_inputs_only():
    def k(x):
        t = _tile((128, 4), nl.uint8)
        t.ap(dtype=nl.float8_e4m3fn_x4, pattern=[[1, 128], [1, 1]])
        return x
    with pytest.raises(NkiValidationError, match="kernel inputs in HBM only"):
        nki.simulate(nki.jit(k, platform_target="trn3"))(np.zeros((1, 1), np.float32))


# ---- the interleaved layout established on device, as the deep dive's last example -------------
def interleave(hbm, use_tensor_copy):
    """[K, F] in HBM -> [K/4, 4F] in SBUF, value j of element f of partition p being row
    j*K/4 + p: by a DMA into SBUF and a strided tensor_copy, or by one strided DMA."""
    P, F = hbm.shape[0] // 4, hbm.shape[1]
    h = hbm.reshape((4, P, F))
    dst = nl.ndarray((P, F, 4), dtype=hbm.dtype, buffer=nl.sbuf)
    if use_tensor_copy:
        tmp = nl.ndarray((P, 4, F), dtype=hbm.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tmp, src=h.ap(pattern=[[F, P], [P * F, 4], [1, F]], offset=0))
        nisa.tensor_copy(dst=dst, src=tmp.ap(pattern=[[4 * F, P], [1, F], [F, 4]], offset=0))
    else:
        nisa.dma_copy(dst=dst, src=h.ap(pattern=[[F, P], [1, F], [P * F, 4]], offset=0))
    return dst.reshape((P, 4 * F))


def strided_quantize_matmul(st_hbm, mv_hbm, use_tensor_copy):
    q = []
    for x in (st_hbm, mv_hbm):
        src = interleave(x, use_tensor_copy)
        P, F = src.shape
        data = nl.ndarray((P, F // 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        scale = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=data, src=src, dst_scale=scale)
        q.append((data, scale))
    return _mx_out(st_hbm.shape[1], mv_hbm.shape[1], *q)


def _stabilized(k, f, seed):
    """[k, f] BF16 values that MXFP8 E5M2 holds exactly once interleaved: in each group, values of
    2 mantissa bits within 2^8 of the group's largest, which has the format's top exponent."""
    rng = np.random.default_rng(seed)
    p = k // 4
    e = rng.integers(EMAX["float8_e5m2"] - 8, EMAX["float8_e5m2"] + 1, (p, f, 4))
    e.reshape(p // 8, 8, f, 4)[:, 0, :, 0] = EMAX["float8_e5m2"]
    v = rng.choice([-1, 1], (p, f, 4)) * (1 + rng.integers(0, 4, (p, f, 4)) / 4) * np.exp2(e)
    v *= np.exp2(np.repeat(rng.integers(-30, -20, (p // 8, f)), 8, axis=0))[..., None]
    return v.transpose(2, 0, 1).reshape(k, f).astype(ml_dtypes.bfloat16)   # row j*p + i <- [i, :, j]


def test_deep_dive_strided_layout_then_quantize_and_matmul():
    """[512, 128] x [512, 512] BF16 in their natural layout, interleaved on device (tensor_copy)
    or by DMA, quantized to MXFP8 E5M2 and multiplied: st.T @ mv within BF16 rounding. The
    strided DMA is the slower way, as the deep dive says (element-wise descriptors)."""
    st, mv = _stabilized(512, 128, 11), _stabilized(512, 512, 12)
    gold = st.astype(np.float64).T @ mv.astype(np.float64)
    times = {}
    for use_tensor_copy in (True, False):
        kern = nki.jit(strided_quantize_matmul, platform_target="trn3")
        out = nki.simulate(kern, check_semantics=True)(st, mv, use_tensor_copy)
        np.testing.assert_allclose(out.astype(np.float64), gold, rtol=2 ** -8,
                                   atol=1e-6 * np.abs(gold).max())
        times[use_tensor_copy] = nki.last_report().total_ns
    assert times[False] > 2 * times[True], times


def test_scales_of_two_tiles_share_a_quadrant():
    """Two 32-partition tiles keep their 4-partition scales at offsets 0 and 4 of one quadrant
    (AWS: scales start in the first 16 partitions of a quadrant; the engine start rule does not
    bind them); each matmul reads its own. Offset 16 raises an error naming the limit."""
    st, mv = _inputs(32, 16, 64, seed=13)
    st2, mv2 = _inputs(32, 16, 64, seed=14)

    def k(a, b, c, d, off2):
        scales = nl.ndarray((32, 64), dtype=nl.uint8, buffer=nl.sbuf)   # 2 x 4 rows used
        out = nl.ndarray((16, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        for i, (s_hbm, m_hbm, off) in enumerate(((a, b, 0), (c, d, off2))):
            q = []
            for x, f in ((s_hbm, 16), (m_hbm, 64)):
                t = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x)
                data = nl.ndarray((32, f), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
                sc = nl.ndarray((4, 16), dtype=nl.uint8, buffer=nl.sbuf) if f == 16 else \
                    scales[off:off + 4, :]
                nisa.quantize_mx(dst=data, src=t, dst_scale=sc)
                q.append((data, sc))
            acc = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul_mx(acc, q[0][0], q[1][0], q[0][1], q[1][1])
            res = nl.ndarray((16, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[:, i * 64:(i + 1) * 64], src=res)
        return out

    kern = nki.jit(k, platform_target="trn3")
    out = nki.simulate(kern, check_semantics=True)(st, mv, st2, mv2, 4)
    f = lambda x, n: x.astype(np.float32).reshape(32, n, 4)   # noqa: E731
    for i, (a, b) in enumerate(((st, mv), (st2, mv2))):
        ref = mx_matmul(f(a, 16), f(b, 64), "float8_e4m3fn", "float8_e4m3fn")
        assert np.abs(out[:, i * 64:(i + 1) * 64] - ref).max() <= 1e-5 * np.abs(ref).max()
    with pytest.raises(NkiValidationError, match=r"first 16 partitions of an SBUF quadrant"):
        nki.simulate(kern)(st, mv, st2, mv2, 16)
