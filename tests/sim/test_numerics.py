"""Formats and rounding against ml_dtypes; instruction semantics against NumPy references."""

import ml_dtypes
import numpy as np
import pytest

import neuron_sim as ns
from neuron_sim.numerics.rounding import (cast, dequantize_mx, quantize_mx, round_rne,
                                          round_stochastic, store)
from tile_programs import tile_program

EDGES = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3.4e38,
                  1.00390625, 1.01171875, 65504.0, 448.0, 57344.0], np.float32)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3", "float8_e4m3fn",
                                   "float8_e5m2"])
def test_rne_is_ml_dtypes(dtype):
    x = np.concatenate([EDGES, np.random.default_rng(0).standard_normal(1000).astype(np.float32)])
    got = round_rne(x, dtype)
    with np.errstate(over="ignore"):
        want = x.astype(getattr(ml_dtypes, dtype) if dtype != "float16" else np.float16)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_rne_ties_to_even_bf16():
    # 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even -> 1.0
    assert float(round_rne(np.float32(1.00390625), "bfloat16")) == 1.0
    assert float(round_rne(np.float32(1.01171875), "bfloat16")) == 1.015625


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3", "float8_e5m2"])
def test_stochastic_rounding_picks_neighbours_and_is_unbiased(dtype):
    rng = np.random.default_rng(1)
    x = np.full(200_000, 1.0 + 1.0 / 3.0 * 2.0 ** -7, np.float32)
    if dtype != "bfloat16":
        x = np.full(200_000, 1.1, np.float32)
    y = round_stochastic(x, dtype, rng).astype(np.float32)
    assert len(np.unique(y)) == 2
    assert abs(y.mean() - x[0]) < 2e-3 * abs(x[0])


def test_stochastic_rounding_keeps_specials():
    y = round_stochastic(np.array([np.inf, -np.inf, np.nan, 0.0, 1.0], np.float32), "bfloat16",
                         np.random.default_rng(0)).astype(np.float32)
    assert np.isinf(y[0]) and np.isinf(y[1]) and np.isnan(y[2]) and y[3] == 0 and y[4] == 1


def test_cast_rejects_unknown_mode():
    with pytest.raises(ValueError):
        cast(np.ones(3, np.float32), "bfloat16", "truncate")


def test_mx_round_trip_within_format_precision():
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    e, s = quantize_mx(x, "float8_e4m3fn")
    assert e.dtype == ml_dtypes.float8_e4m3fn and s.shape == (4, 2)
    back = dequantize_mx(e, s)
    assert np.max(np.abs(back - x) / (np.abs(x) + 1e-3)) < 0.07


def test_matmul_program_matches_numpy_with_fp32_psum_accumulation():
    b = ns.ProgramBuilder("trn2")
    A = b.hbm("A", (256, 128), "bfloat16")
    B = b.hbm("B", (256, 512), "bfloat16")
    C = b.hbm("C", (128, 512), "bfloat16")
    a = b.sbuf("a", (128, 2, 128), "bfloat16")
    x = b.sbuf("x", (128, 2, 512), "bfloat16")
    for k in range(2):
        b.dma_copy(a[:, k, :], A[k * 128:(k + 1) * 128, :])
        b.dma_copy(x[:, k, :], B[k * 128:(k + 1) * 128, :])
    acc = b.psum("acc", (128, 512))
    for k in range(2):
        b.nc_matmul(acc, a[:, k, :], x[:, k, :], accumulate=k > 0)
    o = b.sbuf("o", (128, 512), "bfloat16")
    b.tensor_copy(o, acc)
    b.dma_copy(C, o)
    rng = np.random.default_rng(3)
    av = rng.standard_normal((256, 128)).astype(ml_dtypes.bfloat16)
    bv = rng.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
    out = ns.execute(b.build(), {"A": av, "B": bv})["C"]
    ref = (av.astype(np.float32).T @ bv.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_vector_scalar_gpsimd_semantics():
    def build(b, s, o):
        y = o["Y"]
        b.tensor_scalar(y, s["X"], "multiply", 2.0, "add", 1.0)
        b.activation(y, y, "tanh", reduce_res=o["R"])
        io = b.sbuf("io", (128, 64), "float32")
        b.iota(io, base=0, channel_multiplier=1, pattern=((0, 64),))
        b.tensor_tensor(y, y, io, "add")
    f32 = "float32"
    prog, _ = tile_program(build, {"X": ((128, 64), f32)},
                           {"Y": ((128, 64), f32), "R": ((128, 1), f32)})
    xv = np.random.default_rng(4).standard_normal((128, 64)).astype(np.float32)
    out = ns.execute(prog, {"X": xv})
    t = np.tanh(2 * xv + 1)
    np.testing.assert_allclose(out["R"][:, 0], t.sum(1), rtol=1e-5)
    np.testing.assert_allclose(out["Y"], t + np.arange(128)[:, None], rtol=1e-5)


def _program(build, inputs, outputs_shape, dtype="float32", out_dtype="float32"):
    """Loads `inputs` into SBUF, runs build(builder, sbuf tiles, output tile), stores OUT."""
    prog, _ = tile_program(lambda b, s, o: build(b, s, o["OUT"]),
                           {k: (v.shape, dtype) for k, v in inputs.items()},
                           {"OUT": (outputs_shape, out_dtype)})
    return prog


def _run_vector_program(build, inputs, outputs_shape):
    return ns.execute(_program(build, inputs, outputs_shape), inputs)["OUT"]


def test_transpose_is_bit_exact_even_for_nan():
    xv = np.random.default_rng(5).standard_normal((32, 32)).astype(ml_dtypes.bfloat16)
    xv[3, 7] = np.nan
    prog = _program(lambda b, s, o: b.nc_transpose(o, s["X"], engine="vector"), {"X": xv},
                    (32, 32), "bfloat16", "bfloat16")
    out = ns.execute(prog, {"X": xv})["OUT"]
    np.testing.assert_array_equal(out.view(np.uint16), xv.T.view(np.uint16))


def test_more_instruction_semantics_against_numpy():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    y = rng.standard_normal((128, 256)).astype(np.float32)
    got = _run_vector_program(lambda b, s, o: b.tensor_reduce(o, s["x"], "maximum"),
                              {"x": x}, (128, 1))
    np.testing.assert_array_equal(got[:, 0], x.max(axis=1))
    got = _run_vector_program(
        lambda b, s, o: b.instruction("select", dst=o, predicate=s["p"], on_true=s["x"],
                                      on_false=s["y"]),
        {"x": x, "y": y, "p": (x > 0).astype(np.float32)}, (128, 256))
    np.testing.assert_array_equal(got, np.where(x > 0, x, y))
    got = _run_vector_program(
        lambda b, s, o: b.tensor_tensor_scan(o, s["x"], s["y"], 0.0, "multiply", "add"),
        {"x": np.full_like(x, 1.0), "y": y}, (128, 256))
    np.testing.assert_allclose(got, np.cumsum(y, axis=1), rtol=1e-4, atol=1e-4)
    got = _run_vector_program(lambda b, s, o: b.instruction("reciprocal", dst=o, data=s["x"]),
                              {"x": x}, (128, 256))
    np.testing.assert_array_equal(got, np.float32(1) / x)

    def stats(b, s, o):
        st = b.sbuf("st", (128, 12), "float32")
        b.bn_stats(st[:, 0:6], s["x"][:, 0:128])
        b.bn_stats(st[:, 6:12], s["x"][:, 128:256])
        b.bn_aggr(o, st)
    got = _run_vector_program(stats, {"x": x}, (128, 2))
    np.testing.assert_allclose(got[:, 0], x.mean(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[:, 1], x.var(1), rtol=1e-4, atol=1e-5)
    got = _run_vector_program(
        lambda b, s, o: b.affine_select(o, s["x"], -1e9, channel_multiplier=1,
                                        pattern=((-1, 256),), offset=0, cmp_op="greater_equal"),
        {"x": x}, (128, 256))
    mask = np.arange(128)[:, None] - np.arange(256)[None, :] >= 0
    np.testing.assert_array_equal(got, np.where(mask, x, np.float32(-1e9)))
    got = _run_vector_program(
        lambda b, s, o: b.instruction("tensor_partition_reduce", dst=o, data=s["x"], op="add"),
        {"x": x}, (1, 256))
    np.testing.assert_allclose(got[0], x.sum(0), rtol=1e-5, atol=1e-5)
    idx = rng.integers(0, 256, (128, 32)).astype(np.float32)
    got = _run_vector_program(
        lambda b, s, o: b.instruction("local_gather", dst=o, src=s["x"], index=s["i"]),
        {"x": x, "i": idx}, (128, 32))
    np.testing.assert_array_equal(got, np.take_along_axis(x, idx.astype(int), axis=1))


def test_execute_with_stochastic_rounding_is_seeded_and_unbiased():
    xv = np.full((128, 512), 1.0 + 2.0 ** -9, np.float32)   # between bf16 1.0 and 1 + 2^-7
    prog = _program(lambda b, s, o: b.tensor_copy(o, s["X"]), {"X": xv}, (128, 512),
                    out_dtype="bfloat16")
    rne = ns.execute(prog, {"X": xv})["OUT"].astype(np.float32)
    assert np.all(rne == 1.0)
    a = ns.execute(prog, {"X": xv}, rounding="stochastic", seed=1)["OUT"].astype(np.float32)
    b2 = ns.execute(prog, {"X": xv}, rounding="stochastic", seed=1)["OUT"].astype(np.float32)
    np.testing.assert_array_equal(a, b2)
    assert abs(a.mean() - xv[0, 0]) < 1e-4


def test_fp8_double_row_matmul_contracts_256_and_costs_a_bf16_pass():
    def build(b, s, o):
        acc = b.psum("acc", (64, 256))
        mm = b.nc_matmul(acc, s["S"], s["M"], perf_mode="double_row")
        b.tensor_copy(o["O"], acc)
        return mm
    prog, mm = tile_program(build, {"S": ((128, 2, 64), "float8_e4m3"),
                                    "M": ((128, 2, 256), "float8_e5m2")},
                            {"O": ((64, 256), "float32")})
    c = ns.get_chip("trn2")
    assert prog.cols["ii_ns"][mm] == pytest.approx(256 / c.tensor_clock_hz * 1e9)
    assert prog.cols["flops"][mm] == 2 * 256 * 64 * 256
    rng = np.random.default_rng(7)
    sv = rng.standard_normal((128, 2, 64)).astype(ml_dtypes.float8_e4m3)
    mv = rng.standard_normal((128, 2, 256)).astype(ml_dtypes.float8_e5m2)
    out = ns.execute(prog, {"S": sv, "M": mv})["O"]
    ref = np.einsum("krm,krn->mn", sv.astype(np.float64), mv.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


def test_store_rounds_like_the_format():
    """`store`, every instruction's write (interpreter and NKI trace): floats into an integer
    format round to nearest, NaN to 0, saturate; into a float format RNE (stochastic on
    request); integers and raw words stay as they are."""
    i8 = np.zeros(5, np.int8)
    store(i8, np.array([2.5, -1.6, np.nan, 300.0, -300.0], np.float32), "int8")
    assert i8.tolist() == [2, -2, 0, 127, -128]
    bf = np.zeros(2, ml_dtypes.bfloat16)
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32)      # ties: to even
    store(bf, x, "bfloat16")
    assert bf.astype(np.float32).tolist() == [1.0, 1 + 2**-6]
    store(bf, x, "bfloat16", "stochastic", np.random.default_rng(0))
    assert set(bf.astype(np.float32).tolist()) <= {1.0, 1 + 2**-7, 1 + 2**-6}
    words = np.zeros(2, np.int32)
    store(words, np.array([2**31 - 1, -7], np.int64), "int32")
    assert words.tolist() == [2**31 - 1, -7]
    tf32 = np.zeros(4, np.float32)         # stored as FP32, rounded to 10 mantissa bits
    store(tf32, np.array([1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-12, np.inf], np.float32), "tfloat32")
    assert tf32.tolist() == [1.0, 1 + 2**-9, 1.0, np.inf]
