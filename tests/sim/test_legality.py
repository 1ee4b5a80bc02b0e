"""Capacity and legality: each error names the instruction, the operand, the limit and the chip."""

import pytest

import neuron_sim as ns
from neuron_sim import errors as E


@pytest.fixture
def b():
    return ns.ProgramBuilder("trn2")


def _named(err, instr, operand, chip="trn2"):
    msg = str(err.value)
    assert err.value.instruction == instr and err.value.operand == operand
    assert err.value.chip == chip and chip in msg and instr in msg and operand in msg


def test_sbuf_over_allocation(b):
    b.sbuf("big", (128, 200 * 1024), "uint8")
    with pytest.raises(E.CapacityError) as e:
        b.sbuf("more", (128, 16 * 1024), "uint8")
    assert e.value.memory == "SBUF" and e.value.requested == 16384 and e.value.chip == "trn2"
    assert "more" in str(e.value) and "212984" in str(e.value)


def test_psum_over_allocation(b):
    for i in range(8):
        b.psum(f"bank{i}", (128, 512), "float32")
    with pytest.raises(E.CapacityError) as e:
        b.psum("ninth", (128, 512), "float32")
    assert e.value.memory == "PSUM" and e.value.free == 0


def test_freed_tiles_are_reusable(b):
    for i in range(20):
        t = b.psum(f"t{i}", (128, 512))
        b.free(t)


def test_partition_dim_over_128(b):
    with pytest.raises(E.PartitionError) as e:
        b.sbuf("tall", (256, 4), "float32")
    assert "128" in str(e.value)


def test_compute_engines_cannot_read_hbm(b):
    h = b.hbm("h", (128, 4), "float32")
    s = b.sbuf("s", (128, 4), "float32")
    with pytest.raises(E.MemoryAccessError) as e:
        b.tensor_copy(s, h)
    _named(e, "tensor_copy", "src")


def test_moving_free_size_over_limit(b):
    st = b.sbuf("st", (128, 128), "bfloat16")
    mv = b.sbuf("mv", (128, 1024), "bfloat16")
    out = b.psum("out", (128, 1024), "float32")
    with pytest.raises(E.FreeSizeError) as e:
        b.nc_matmul(out, st, mv)
    _named(e, "nc_matmul", "moving")
    assert "512" in str(e.value)


def test_stationary_free_size_over_limit(b):
    st = b.sbuf("st", (128, 256), "bfloat16")
    mv = b.sbuf("mv", (128, 512), "bfloat16")
    out = b.psum("out", (128, 512), "float32")
    with pytest.raises(E.FreeSizeError) as e:
        b.nc_matmul(out, st, mv)
    _named(e, "nc_matmul", "stationary")


def test_partition_start_rules(b):
    t = b.sbuf("t", (128, 64), "float32")
    b.tensor_copy(t[64:128, :], t[0:64, :])           # 64 partitions at 0 / 64: fine
    b.tensor_copy(t[96:128, :], t[32:64, :])          # 32 at multiples of 32: fine
    with pytest.raises(E.PartitionError) as e:
        b.tensor_copy(t[16:48, :], t[0:32, :])
    _named(e, "tensor_copy", "dst")
    with pytest.raises(E.PartitionError):
        b.tensor_copy(t[32:96, :], t[0:64, :])        # 64 partitions must start at 0 or 64
    with pytest.raises(E.PartitionError):
        b.tensor_copy(t[1:128, :], t[0:127, :])       # > 64 partitions must start at 0


def test_tensor_engine_writes_only_psum(b):
    st = b.sbuf("st", (128, 128), "bfloat16")
    mv = b.sbuf("mv", (128, 512), "bfloat16")
    out = b.sbuf("out", (128, 512), "float32")
    with pytest.raises(E.MemoryAccessError) as e:
        b.nc_matmul(out, st, mv)
    _named(e, "nc_matmul", "dst")
    assert "PSUM" in str(e.value)


def test_gpsimd_has_no_psum_port(b):
    p = b.psum("p", (128, 512))
    s = b.sbuf("s", (128, 512), "float32")
    with pytest.raises(E.MemoryAccessError) as e:
        b.tensor_copy(s, p, engine="gpsimd")
    _named(e, "tensor_copy", "src")
    assert "GpSimd" in str(e.value)


def test_dma_has_no_path_to_psum(b):
    h = b.hbm("h", (128, 512), "float32")
    p = b.psum("p", (128, 512))
    with pytest.raises(E.MemoryAccessError) as e:
        b.dma_copy(p, h)
    _named(e, "dma_copy", "dst")


def test_unsupported_dtype_for_engine(b):
    st = b.sbuf("st", (128, 128), "int32")
    mv = b.sbuf("mv", (128, 512), "int32")
    out = b.psum("out", (128, 512), "float32")
    with pytest.raises(E.DtypeError) as e:
        b.nc_matmul(out, st, mv)
    _named(e, "nc_matmul", "stationary")


def test_fp32_matmul_needs_both_operands_fp32(b):
    st = b.sbuf("st", (128, 128), "float32")
    mv = b.sbuf("mv", (128, 512), "bfloat16")
    out = b.psum("out", (128, 512), "float32")
    with pytest.raises(E.DtypeError) as e:
        b.nc_matmul(out, st, mv)
    assert e.value.operand == "moving"


def test_bn_stats_free_limit(b):
    x = b.sbuf("x", (128, 1024), "float32")
    s = b.sbuf("s", (128, 6), "float32")
    with pytest.raises(E.FreeSizeError) as e:
        b.bn_stats(s, x)
    _named(e, "bn_stats", "data")


def test_double_row_needs_fp8_and_chip():
    b1 = ns.ProgramBuilder("trn1")
    st = b1.sbuf("st", (128, 2, 64), "float8_e4m3")
    mv = b1.sbuf("mv", (128, 2, 256), "float8_e4m3")
    out = b1.psum("out", (64, 256))
    with pytest.raises(E.CapabilityError) as e:
        b1.nc_matmul(out, st, mv, perf_mode="double_row")
    assert e.value.chip == "trn1"
    b2 = ns.ProgramBuilder("trn2")
    st = b2.sbuf("st", (128, 2, 64), "float8_e4m3")
    mv = b2.sbuf("mv", (128, 2, 256), "float8_e4m3")
    out = b2.psum("out", (64, 256))
    b2.nc_matmul(out, st, mv, perf_mode="double_row")


def test_unsatisfiable_semaphore_wait_is_a_deadlock(b):
    t = b.sbuf("t", (128, 64), "float32")
    b.memset(t, 0.0, engine="gpsimd", signal=3)
    b.tensor_copy(t, t, wait=[(3, 2)])
    with pytest.raises(E.DeadlockError) as e:
        b.build()
    assert "VectorE" in e.value.engines and "GpSimd" in e.value.engines


def test_cyclic_waits_deadlock_in_the_timing_engine(b):
    x = b.sbuf("x", (128, 64), "float32")
    y = b.sbuf("y", (128, 64), "float32")
    b.memset(x, 1.0, engine="vector", wait=[(1, 1)])     # VectorE waits for ScalarE's 2nd instr
    b.memset(y, 1.0, engine="vector", signal=2)
    b.activation(y, y, "copy", signal=9)                  # ScalarE head waits for VectorE's 2nd
    b.activation(x, x, "copy", signal=1)
    prog = b.build()
    with pytest.raises(E.DeadlockError) as e:
        ns.simulate(prog)
    assert set(e.value.engines) == {"VectorE", "ScalarE"}
    with pytest.raises(E.DeadlockError):
        ns.simulate(prog, reference=True)


def test_matmul_output_must_stay_in_one_psum_bank(b):
    st = b.sbuf("st", (128, 128), "bfloat16")
    mv = b.sbuf("mv", (128, 512), "bfloat16")
    two_banks = b.psum("two", (128, 1024), "float32")
    b.nc_matmul(two_banks[:, 512:1024], st, mv)          # the second bank: fine
    with pytest.raises(E.FreeSizeError) as e:
        b.nc_matmul(two_banks[:, 256:768], st, mv)       # straddles two banks
    _named(e, "nc_matmul", "dst")
