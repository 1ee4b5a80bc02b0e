"""Each check AWS's CPU simulator lacks raises an error (or, for spills, reports traffic) that
names the kernel's file:line, the instruction and the limit (issue 4, "Checks")."""

import os
import warnings

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl

HERE = os.path.abspath(__file__)


def line_of(marker):
    with open(HERE) as f:
        for n, line in enumerate(f, 1):
            if f"# {marker}" in line and "line_of" not in line:
                return n
    raise AssertionError(marker)


def check_points_here(err, marker):
    assert err.loc is not None and os.path.abspath(err.loc[0]) == HERE, err.loc
    assert err.loc[1] == line_of(marker), (err.loc, line_of(marker))
    assert f"{os.path.basename(HERE)}:{err.loc[1]}" in str(err)


X = np.ones((128, 512), dtype=np.float32)


def sim(kernel, *args, target="trn2", **kw):
    return nki.simulate(kernel, platform_target=target, **kw)(*args)


def _out(t):
    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o


def _written_psum(shape):
    ps = nl.ndarray(shape, dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=ps, value=1.0, engine=nisa.vector_engine)
    return ps


RAISES = []   # the kernels below that must raise: (kernel, error, message pattern, line, more)


def raises(error, match, marker, also=""):
    """The decorated kernel must raise `error` matching `match`, naming its line `# marker`."""
    def add(kernel):
        RAISES.append(pytest.param(kernel, error, match, marker, also, id=kernel.__name__))
        return kernel
    return add


# ---- tile limits ------------------------------------------------------------------------------
@raises(nki.NkiValidationError, "exceeds the 128 partitions", "here:partitions")
@nki.jit
def too_many_partitions(x):
    t = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)   # here:partitions
    return _out(t)


@raises(nki.NkiValidationError, "moving free size <= 512, found 1024", "here:moving", also="nisa.nc_matmul")
@nki.jit
def moving_too_wide(x):
    a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=a, value=1.0)
    nisa.memset(dst=b, value=1.0)
    ps = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=a, moving=b)   # here:moving
    return x


@raises(nki.NkiValidationError, "at most 512 elements", "here:bn")
@nki.jit
def bn_stats_too_wide(x):
    t = nl.load(x)   # 512 wide is fine; 1024 is not
    big = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=big, value=0.0)
    st = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_stats(dst=st, data=t)
    nisa.bn_stats(dst=st, data=big)   # here:bn
    return x


@raises(nki.NkiValidationError, "FP32/TF32 like the other operand", "here:dtype")
@nki.jit
def mixed_fp32_matmul(x):
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.memset(dst=b, value=1.0)
    nisa.nc_matmul(dst=ps, stationary=nl.load(x[:, 0:128]), moving=b)   # here:dtype
    return x


# ---- partition start rules ----------------------------------------------------------------------
@raises(nki.NkiPartitionError, "33-64 partitions must start at partition 0 or 64", "here:start")
@nki.jit
def bad_partition_start(x):
    t = nl.load(x)
    u = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u[0:64], src=t[0:64])
    nisa.tensor_copy(dst=u[16:56], src=t[16:56])   # here:start
    return x


# ---- engine / memory legality --------------------------------------------------------------------
@raises(nki.NkiValidationError, "found a PSUM tensor .*GpSimd cannot access PSUM", "here:gpsimd")
@nki.jit
def gpsimd_reads_psum(x):
    ps = _written_psum((128, 512))
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=ps, engine=nisa.gpsimd_engine)   # here:gpsimd
    return x


@raises(nki.NkiValidationError, "DMA cannot access PSUM", "here:dmapsum")
@nki.jit
def dma_into_psum(x):
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.dma_copy(dst=ps, src=x)   # here:dmapsum
    return x


@raises(nki.NkiValidationError, "TensorE to access SBUF, found a PSUM tensor", "here:mmpsum")
@nki.jit
def matmul_from_psum(x):
    ps = _written_psum((128, 128))
    b = nl.load(x)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=out, stationary=ps, moving=b)   # here:mmpsum
    return x


# ---- capacity, spills, overlaps --------------------------------------------------------------------
@raises(nki.NkiCapacityError, "PSUM is full", "here:psum", also="16384 of 16384 bytes per partition live")
@nki.jit
def too_many_psum_tiles(x):
    b = nl.load(x)
    a = nl.load(x[:, 0:128])
    tiles = []
    for i in range(9):          # 9 live accumulators, 8 banks
        ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=ps, stationary=a, moving=b)   # here:psum
        tiles.append(ps)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for ps in tiles:
        nisa.tensor_tensor(dst=acc, data1=acc, data2=ps, op=nl.add)
    return _out(acc)


@raises(nki.NkiCapacityError, "needs 262144 bytes per partition but SBUF has 212984", "here:big")
@nki.jit
def one_tensor_too_big(x):
    big = nl.ndarray((128, 64 * 1024), dtype=nl.float32, buffer=nl.sbuf)   # here:big
    for i in range(4):
        nisa.memset(dst=big[:, i * 16384:(i + 1) * 16384], value=0.0)
    return x


@nki.jit
def needs_spills(x):
    tiles = []
    for i in range(12):         # 12 x 32 KiB live > 208 KiB of Trn2 SBUF: the compiler spills
        t = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=float(i))
        tiles.append(t)
    acc = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for t in tiles:
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    out = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


def test_sbuf_overflow_spills_and_counts_traffic():
    out = sim(needs_spills, X)
    np.testing.assert_array_equal(out, np.full((128, 8192), sum(range(12)), np.float32))
    rep = nki.last_report()
    assert rep.spills >= 1 and rep.spill_bytes >= 2 * 128 * 8192 * 4
    assert rep.sbuf_peak_bytes_per_partition <= rep.sbuf_capacity_bytes_per_partition
    # the spill DMAs are in the timed program
    assert rep.program_rows > rep.instructions


@raises(nki.NkiOverlapError, r"bytes \[1024, 3072\) overlaps", "here:overlap")
@nki.jit
def overlapping_placements(x):
    a = nl.sbuf.view(dtype=nl.float32, shape=(128, 512), address=(0, 0))
    b = nl.sbuf.view(dtype=nl.float32, shape=(128, 512), address=(0, 1024))
    nisa.memset(dst=a, value=1.0)
    nisa.memset(dst=b, value=2.0)   # here:overlap
    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    return _out(a)


# ---- reads of never-written memory -------------------------------------------------------------------
def _half_written(x):
    """x loaded, and a [128, 512] tile with only its columns 0:256 written (from x)."""
    t = nl.load(x)
    u = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u[:, 0:256], src=t[:, 0:256])
    return t, u


@raises(nki.NkiUninitializedReadError, "reads 32768 of 65536 elements", "here:uninit")
@nki.jit
def reads_garbage(x):
    t, u = _half_written(x)
    v = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=v, data1=t, data2=u, op=nl.add)   # here:uninit
    return _out(v)


def test_uninitialized_read_warns_and_propagates_nan():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = sim(reads_garbage, X, on_uninitialized="warn")
    assert np.isnan(out[:, 256:]).all() and (out[:, :256] == 2).all()
    assert any(issubclass(x.category, nki.NkiUninitializedReadWarning) for x in w)
    assert nki.last_report().findings[0].kind == "uninitialized-read"


def test_a_read_inside_the_written_part_of_a_tile_is_initialized():
    """A tile written in part: reading only that part is no uninitialized read."""
    @nki.jit
    def reads_written_half(x):
        _, u = _half_written(x)
        v = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=v, src=u[:, 0:256])
        return _out(v)
    np.testing.assert_array_equal(sim(reads_written_half, X), X[:, :256])


@raises(nki.NkiCapacityError, "straddles a 2048-byte bank boundary", "here:bank")
@nki.jit
def psum_across_banks(x):
    ps = nl.psum.view(dtype=nl.float32, shape=(128, 512), address=(0, 1024))
    nisa.memset(dst=ps, value=0.0)   # here:bank
    o = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=ps)
    return _out(o)


@raises(nki.NkiValidationError, "accumulation group inside one 2048 B PSUM bank", "here:mmbank")
@nki.jit
def matmul_across_banks(x):
    a = nl.load(x[:, 0:128])
    b = nl.load(x)
    ps = nl.psum.view(dtype=nl.float32, shape=(128, 512), address=(0, 1024))
    nisa.nc_matmul(dst=ps, stationary=a, moving=b)   # here:mmbank
    return x


@raises(nki.NkiValidationError, "5 free dimensions", "here:dims")
@nki.jit
def five_free_dims(x):
    t = nl.ndarray((128, 2, 3, 5, 7, 11), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    u = nl.ndarray((128, 11, 7, 5, 3, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t.permute((0, 5, 4, 3, 2, 1)))   # here:dims
    return x


# rules a module declares in check_views (they need the kernel's view before its dims merge)
@raises(nki.NkiValidationError, r"the partition axis \(0\) cannot be reduced", "here:axis0")
@nki.jit
def reduce_partition_axis(x):
    r = nl.ndarray((1, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r, op=nl.add, data=nl.load(x), axis=0)   # here:axis0
    return x


@raises(nki.NkiValidationError, "axis=1 must be the last contiguous free dimension", "here:axis1")
@nki.jit
def reduce_middle_axis(x):
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r, op=nl.add, data=nl.load(x).reshape((128, 8, 64)), axis=1)   # here:axis1
    return x


@raises(nki.NkiValidationError, "dst dtype bfloat16 must equal data dtype float32", "here:trdt")
@nki.jit
def transpose_converting(x):
    ps = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_transpose(dst=ps, data=nl.load(x[:, 0:128]), engine=nisa.tensor_engine)   # here:trdt
    return x


@pytest.mark.parametrize("kernel, error, match, marker, also", RAISES)
def test_error_points_at_the_kernel_line(kernel, error, match, marker, also):
    with pytest.raises(error, match=match) as e:
        sim(kernel, X)
    assert also in str(e.value)
    check_points_here(e.value, marker)
