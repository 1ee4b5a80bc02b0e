"""Trn2 and Trn3 differ where the hardware differs: clocks, SBUF size, MX matmul, BF16 PSUM,
VectorE exponential. One test each."""

import pytest

import neuron_sim as ns
from neuron_sim import errors as E
from tile_programs import tile_program


def test_vector_clock_differs():
    t2, t3 = ns.get_chip("trn2"), ns.get_chip("trn3")
    assert (t2.vector_clock_hz, t3.vector_clock_hz) == (0.96e9, 1.2e9)
    times = {}
    for c in (t2, t3):
        b = ns.ProgramBuilder(c)
        x = b.sbuf("x", (128, 2048), "float32")
        b.tensor_scalar(x, x, "multiply", 2.0)
        times[c.name] = ns.simulate(b.build()).engine_busy_ns["VectorE"]
    assert times["trn2"] == pytest.approx(2048 / 0.96)
    assert times["trn3"] == pytest.approx(2048 / 1.2)


def test_sbuf_size_differs():
    assert ns.get_chip("trn2").sbuf_bytes_per_partition == 224 * 1024
    assert ns.get_chip("trn3").sbuf_bytes_per_partition == 256 * 1024
    ns.ProgramBuilder("trn3").sbuf("t", (128, 230 * 1024), "uint8")
    with pytest.raises(E.CapacityError):
        ns.ProgramBuilder("trn2").sbuf("t", (128, 230 * 1024), "uint8")


def _mx(chip):
    b = ns.ProgramBuilder(chip)
    st = b.sbuf("st", (128, 128), "float8_e4m3fn_x4")
    mv = b.sbuf("mv", (128, 512), "float8_e4m3fn_x4")
    ss = b.sbuf("ss", (128, 128), "uint8")      # scales: 4 partitions in each quadrant
    ms = b.sbuf("ms", (128, 512), "uint8")
    out = b.psum("out", (128, 512))
    b.instruction("nc_matmul_mx", dst=out, stationary=st, moving=mv, stationary_scale=ss,
                  moving_scale=ms)
    return b


def test_mx_matmul_only_on_trn3():
    prog = _mx("trn3").build()
    r = ns.simulate(prog)
    assert r.summary["tensor_flops"] == 2 * 512 * 128 * 512      # K = 512 per instruction
    with pytest.raises(E.CapabilityError) as e:
        _mx("trn2")
    assert e.value.chip == "trn2" and "nc_matmul_mx" in str(e.value)


def test_bf16_psum_only_on_trn3():
    for chip in ("trn2", "trn3"):
        b = ns.ProgramBuilder(chip)
        st = b.sbuf("st", (128, 128), "bfloat16")
        mv = b.sbuf("mv", (128, 512), "bfloat16")
        out = b.psum("out", (128, 512), "bfloat16")
        if chip == "trn3":
            b.nc_matmul(out, st, mv)
        else:
            with pytest.raises(E.DtypeError):
                b.nc_matmul(out, st, mv)
    # and the larger moving size it allows (all 8 banks)
    assert ns.get_chip("trn3").matmul_moving_fmax("bfloat16") == 8192
    assert ns.get_chip("trn2").matmul_moving_fmax("bfloat16") == 512


def test_vector_exponential_only_on_trn3():
    b3 = ns.ProgramBuilder("trn3")
    x = b3.sbuf("x", (128, 1024), "float32")
    b3.instruction("exponential", dst=x, src=x)
    b3.activation(x, x, "exp")
    r = ns.simulate(b3.build())
    vec, act = r.engine_busy_ns["VectorE"], r.engine_busy_ns["ScalarE"]
    assert act / vec == pytest.approx(4.0)         # 4x ScalarE exp, same 1.2 GHz clocks
    b2 = ns.ProgramBuilder("trn2")
    y = b2.sbuf("y", (128, 1024), "float32")
    with pytest.raises(E.CapabilityError):
        b2.instruction("exponential", dst=y, src=y)


def test_quantize_then_mx_matmul_on_trn3_matches_dequantized_numpy():
    import numpy as np
    def build(b, s, o):
        sq = b.sbuf("sq", (128, 128), "float8_e4m3fn_x4")
        mq = b.sbuf("mq", (128, 64), "float8_e4m3fn_x4")
        ss = b.sbuf("ss", (128, 128), "uint8")
        ms = b.sbuf("ms", (128, 64), "uint8")
        b.instruction("quantize_mx", dst=sq, src=s["S"], dst_scale=ss)
        b.instruction("quantize_mx", dst=mq, src=s["M"], dst_scale=ms)
        acc = b.psum("acc", (128, 64))
        b.instruction("nc_matmul_mx", dst=acc, stationary=sq, moving=mq, stationary_scale=ss,
                      moving_scale=ms)
        b.tensor_copy(o["O"], acc)
    prog, _ = tile_program(build, {"S": ((128, 128 * 4), "bfloat16"),
                                   "M": ((128, 64 * 4), "bfloat16")},
                           {"O": ((128, 64), "float32")}, chip="trn3")
    rng = np.random.default_rng(0)
    sv = rng.standard_normal((128, 512)).astype(np.float32)
    mv = rng.standard_normal((128, 256)).astype(np.float32)
    out = ns.execute(prog, {"S": sv, "M": mv})["O"]
    # the contraction runs over partitions and the 4 packed values of each element
    exact = np.einsum("kiq,kjq->ij", sv.reshape(128, 128, 4), mv.reshape(128, 64, 4))
    rel = np.abs(out - exact).max() / np.abs(exact).max()
    assert rel < 0.05
    with pytest.raises(E.CapabilityError):
        b2 = ns.ProgramBuilder("trn2")
        b2.instruction("quantize_mx", dst=b2.sbuf("q", (128, 8), "float8_e5m2_x4"),
                       src=b2.sbuf("d", (128, 32), "bfloat16"),
                       dst_scale=b2.sbuf("s", (128, 8), "uint8"))
