"""A same-dtype clone / contiguous / _to_copy / copy_ of a strided view costs what
neuron::copy_d2d of it costs: both go through movement.device_copy, the one owner of how a
strided copy is timed (dma_transpose for a transposed source on chips that have it, runs of the
innermost contiguous extent otherwise). copy_like streamed a transposed source with one DMA
descriptor per element: x.t().contiguous() of [4096, 4096] BF16 on trn2 took 1.23 ms, copy_d2d
of the same view 0.208 ms."""

from math import prod

import pytest

from neuron_sim.lower import OpSpec, TensorSpec, lower_op, lower_sequence


def _permuted(shape, order):
    """Strides of `shape` viewed as a contiguous tensor permuted by `order` (x.permute(order))."""
    base = [0] * len(shape)
    for i, o in enumerate(order):
        base[o] = shape[i]
    row = [prod(base[k + 1:]) for k in range(len(base))]
    return tuple(row[o] for o in order)


# (shape, dtype, strides of the source view): transposes (innermost stride != 1), head permutes
# (innermost dim contiguous), a K^T of attention and a tiny one
VIEWS = [((4096, 4096), "bfloat16", (1, 4096)), ((4096, 4096), "float32", (1, 4096)),
         ((1001, 128), "float32", (1, 1001)), ((128, 1001), "bfloat16", (1, 128)),
         ((8, 1024, 64), "float32", _permuted((8, 1024, 64), (1, 0, 2))),
         ((2, 8, 1024, 64), "bfloat16", _permuted((2, 8, 1024, 64), (0, 2, 1, 3))),
         ((2, 8, 64, 1024), "bfloat16", _permuted((2, 8, 64, 1024), (0, 1, 3, 2))),
         ((5, 3), "float32", (1, 5))]
TARGETS = [("trn1", 1), ("trn2", 1), ("trn2", 2), ("trn3", 1), ("trn3", 2)]


@pytest.mark.parametrize("chip, lnc", TARGETS)
@pytest.mark.parametrize("shape, dtype, strides", VIEWS)
def test_a_copy_of_a_strided_view_costs_what_copy_d2d_costs(shape, dtype, strides, chip, lnc):
    x, y = TensorSpec(shape, dtype, strides), TensorSpec(shape, dtype)
    d2d = lower_op(OpSpec("neuron::copy_d2d", (x,), (y,)), chip, lnc).total_ns
    for op in (OpSpec("aten::clone", (x,), (y,)), OpSpec("aten::contiguous", (x,), (y,)),
               OpSpec("aten::_to_copy", (x,), (y,)), OpSpec("aten::copy", (y, x), (y,))):
        assert lower_op(op, chip, lnc).total_ns == pytest.approx(d2d, rel=0.01), op.name


@pytest.mark.parametrize("chip, lnc", TARGETS)
@pytest.mark.parametrize("shape, dtype, strides", VIEWS)
def test_a_cast_of_a_strided_view_costs_what_copy_d2d_of_it_costs(shape, dtype, strides, chip,
                                                                   lnc):
    # a transposed bf16 -> fp32 _to_copy on trn2 streamed one descriptor per element: 1.32 ms,
    # copy_d2d's dma_transpose and VectorE cast 0.29 ms
    other = "float32" if dtype == "bfloat16" else "bfloat16"
    x, y = TensorSpec(shape, dtype, strides), TensorSpec(shape, other)
    d2d = lower_op(OpSpec("neuron::copy_d2d", (x,), (y,)), chip, lnc).total_ns
    cast = lower_op(OpSpec("aten::_to_copy", (x,), (y,), {"dtype": other}), chip, lnc).total_ns
    assert cast == pytest.approx(d2d, rel=0.01)


def test_the_reported_transposed_clone_is_a_dma_transpose():
    # 1.23 ms before (one descriptor per element), as copy_d2d's 0.208 ms now
    x = TensorSpec((4096, 4096), "bfloat16", (1, 4096))
    t = lower_op(OpSpec("aten::clone", (x,), (TensorSpec((4096, 4096), "bfloat16"),)), "trn2")
    assert 200e3 < t.total_ns < 220e3


@pytest.mark.parametrize("name", ["aten::clone", "neuron::copy_d2d"])
def test_a_transposed_copy_read_later_in_the_sequence_stays_in_sbuf(name):
    # as the element-wise stream keeps its output: the dma_transpose lands in SBUF and relu reads
    # it there (HBM: x read, d written), not stored and loaded again (4x the bytes before)
    x = TensorSpec((512, 256), "bfloat16", (1, 512), id="x")
    c, d = TensorSpec((512, 256), "bfloat16", id="c"), TensorSpec((512, 256), "bfloat16", id="d")
    seq = [OpSpec(name, (x,), (c,)), OpSpec("aten::relu", (c,), (d,))]
    t = lower_sequence(seq, chip="trn2", lnc=1, live_outputs={"d"})
    assert t.hbm_bytes == 2 * x.nbytes


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
@pytest.mark.parametrize("shape, dtype, strides", VIEWS)
def test_a_clone_that_keeps_the_views_strides_is_a_flat_copy(shape, dtype, strides, chip):
    # x.t().clone() keeps x.t()'s strides (preserve_format): the storage is copied as it lies,
    # at a contiguous copy's cost (1.256 ms for [4096, 4096] BF16 on trn2 before, 0.186 ms now)
    x, flat = TensorSpec(shape, dtype, strides), TensorSpec(shape, dtype)
    contiguous = lower_op(OpSpec("neuron::copy_d2d", (flat,), (flat,)), chip).total_ns
    for name in ("aten::clone", "neuron::copy_d2d"):
        t = lower_op(OpSpec(name, (x,), (TensorSpec(shape, dtype, strides),)), chip)
        assert t.total_ns == pytest.approx(contiguous), name
