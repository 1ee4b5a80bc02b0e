"""Capacity and legality: each error names the instruction, the operand, the limit and the chip."""

import pytest

import neuron_sim as ns
from neuron_sim import errors as E
from neuron_sim.isa import build_params, instruction_names, module_for


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


@pytest.mark.parametrize("src, dst, op, engine, operand, text", [
    ("hbm", "sbuf", "tensor_copy", "vector", "src", "HBM"),
    ("psum", "sbuf", "tensor_copy", "gpsimd", "src", "GpSimd"),
    ("hbm", "psum", "dma_copy", None, "dst", "PSUM"),
], ids=["compute_engines_cannot_read_hbm", "gpsimd_has_no_psum_port", "dma_has_no_path_to_psum"])
def test_memory_an_engine_cannot_reach(b, src, dst, op, engine, operand, text):
    a, c = getattr(b, src)("a", (128, 512), "float32"), getattr(b, dst)("c", (128, 512), "float32")
    with pytest.raises(E.MemoryAccessError) as e:
        getattr(b, op)(c, a, **({"engine": engine} if engine else {}))
    _named(e, op, operand)
    assert text in str(e.value)


@pytest.mark.parametrize("op, engine, allowed", [
    ("tensor_tensor", "scalar", "VectorE, GpSimd"),
    ("tensor_copy", "tensor", "VectorE, ScalarE, GpSimd"),
])
def test_an_engine_that_does_not_run_the_instruction(b, op, engine, allowed):
    """The module's ENGINES hold for every caller, the lowering's named methods too (not only
    nisa): tensor_tensor has no ScalarE form [ISA]."""
    x, y = b.sbuf("x", (128, 64), "float32"), b.sbuf("y", (128, 64), "float32")
    args = (y, x, x, "add") if op == "tensor_tensor" else (y, x)
    with pytest.raises(E.CapabilityError, match=f"expected one of {allowed}") as e:
        getattr(b, op)(*args, engine=engine)
    _named(e, op, "engine")


@pytest.mark.parametrize("error, st, mv, out, operand, text", [  # st, mv: (free size, dtype)
    (E.FreeSizeError, (128, "bfloat16"), (1024, "bfloat16"), "psum", "moving", "512"),
    (E.FreeSizeError, (256, "bfloat16"), (512, "bfloat16"), "psum", "stationary", ""),
    (E.MemoryAccessError, (128, "bfloat16"), (512, "bfloat16"), "sbuf", "dst", "PSUM"),
    (E.DtypeError, (128, "int32"), (512, "int32"), "psum", "stationary", ""),
    (E.DtypeError, (128, "float32"), (512, "bfloat16"), "psum", "moving", "float32"),
], ids=["moving_free_size", "stationary_free_size", "output_only_to_psum", "integer_dtype",
        "fp32_needs_both_operands_fp32"])
def test_matmul_operand_errors(b, error, st, mv, out, operand, text):
    dst = getattr(b, out)("out", (128, mv[0]), "float32")
    with pytest.raises(error) as e:
        b.nc_matmul(dst, b.sbuf("st", (128, st[0]), st[1]), b.sbuf("mv", (128, mv[0]), mv[1]))
    _named(e, "nc_matmul", operand)
    assert text in str(e.value)



# build parameters that are never tensors: every other one is a tensor operand the module declares
_ATTRIBUTES = {
    "accumulate", "axes", "axis", "channel_multiplier", "cmp_op", "dge_mode", "dma_engine",
    "dst_rmw_op", "engine", "engines", "is_moving_onezero", "is_stationary_onezero",
    "is_transpose", "keepdims", "negate", "offset", "on_false_value", "oob_mode", "op", "op0",
    "op1", "pattern", "perf_mode", "priority", "queue", "reduce_cmd", "reduce_init", "reduce_op",
    "reverse0", "reverse1", "reverse_pred", "seed", "tile_position", "tile_size", "value"}


def test_every_module_declares_its_tensor_operands():
    """OPERANDS names exactly the tensor parameters of each registry module's `build`, the
    outputs (NKI's dst, dst_scale, reduce_res) written and the inputs read."""
    for name in instruction_names():
        mod = module_for(name)
        declared = mod.OPERANDS
        assert set(declared) == build_params(mod) - _ATTRIBUTES, name
        for k, o in declared.items():
            assert o.role == ("write" if k in ("dst", "dst_scale", "reduce_res") else "read"), k


@pytest.mark.parametrize("instr, chip, args, operand, hint", [
    ("quantize_mx", "trn3", {"dst": ("sbuf", (32, 4), "float8_e4m3fn_x4"),
                             "src": ("psum", (32, 16), "bfloat16"),
                             "dst_scale": ("sbuf", (4, 4), "uint8")},
     "src", "quantize_mx works in SBUF"),
    ("dma_transpose", "trn2", {"dst": ("hbm", (64, 32), "float32"),
                               "src": ("sbuf", (32, 64), "float32")},
     "dst", "transpose into SBUF"),
], ids=["quantize_mx_src_in_psum", "dma_transpose_to_hbm"])
def test_a_declared_memory_narrows_the_engines_reach(instr, chip, args, operand, hint):
    """VectorE reaches PSUM and the DMA HBM, but these operands are declared SBUF only."""
    b = ns.ProgramBuilder(chip)
    tiles = {k: getattr(b, mem)(k, shape, dtype) for k, (mem, shape, dtype) in args.items()}
    with pytest.raises(E.MemoryAccessError) as e:
        b.instruction(instr, **tiles)
    _named(e, instr, operand, chip)
    assert "to access SBUF" in str(e.value) and hint in str(e.value)

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


def test_matmul_checks_remembered_by_input_shape_not_address(b):
    """nc_matmul's checks are kept for inputs of the same shape wherever they sit (the inputs'
    addresses play no part in them), but the destination's bank is checked at every address."""
    blk = b.sbuf("blk", (128, 8, 512), "bfloat16")
    mv = b.sbuf("mv", (128, 512), "bfloat16")
    two_banks = b.psum("two", (128, 1024), "float32")
    for k in range(8):
        b.nc_matmul(two_banks[:, 512:1024], blk[:, k, 0:128], mv)
    with pytest.raises(E.FreeSizeError) as e:
        b.nc_matmul(two_banks[:, 256:768], blk[:, 3, 0:128], mv)
    _named(e, "nc_matmul", "dst")
    with pytest.raises(E.FreeSizeError):      # moving too wide: the shape is part of the key
        b.nc_matmul(two_banks[:, 512:1024], blk[:, 3, 0:128], blk[:, 0:2, :])


def test_core_barrier_needs_a_second_core():
    from neuron_sim.isa.sync import core_barrier
    with pytest.raises(E.CapabilityError) as e:
        core_barrier.build(ns.get_chip("trn1"))
    _named(e, "core_barrier", "data", "trn1")
    assert "one NeuronCore per logical core" in str(e.value)
    assert "no other core to wait for: remove the barrier" in str(e.value)
