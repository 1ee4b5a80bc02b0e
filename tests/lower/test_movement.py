"""neuron_sim/lower/rules/movement.py: where the copies it emits read and write."""

from neuron_sim import get_chip
from neuron_sim.lower import TensorSpec
from neuron_sim.lower.context import LowerCtx
from neuron_sim.lower.rules.movement import strided_copy
from neuron_sim.lower.spec import dense_order


def test_transposed_copy_reads_each_chunk_from_its_own_rows_of_the_source():
    # [128, 1001] FP32 streams as two chunks of 501 and 500 columns (the last one short): the
    # dma_transpose of chunk j reads rows j*501.. of the [1001, 128] storage, inside the source
    src = TensorSpec((128, 1001), "float32", (1, 128), ("x", 0))
    out = TensorSpec((128, 1001), "float32", None, ("o", 0))
    ctx = LowerCtx(get_chip("trn2"), keep_operands=True)
    p, cols, f, total = ctx.chunks(out)
    assert (p, cols, f, total) == (128, 1001, 501, 2)
    strided_copy(ctx, src, out)
    reads = [e.reads[0] for e in ctx.b.build().emits if e.name == "dma_transpose"]
    assert [r.tensor.id for r in reads] == [ctx.hbm(src).id] * 2
    assert [r.box()[2:] for r in reads] == [(0, 501 * 128), (501 * 128, 1001 * 128)]
    assert reads[-1].box()[3] <= ctx.hbm(src).shape[0]


def test_dense_order_lists_a_gapless_view_in_memory_order():
    # a transpose is dense (its base's order), a slice has gaps, an expand overlaps; a size-1
    # dimension's stride never counts (a permute that moved it, x.t() of a column)
    assert dense_order((3, 4), (1, 3)) == (4, 3)
    assert dense_order((3, 4), (8, 1)) is None
    assert dense_order((3, 4), (0, 1)) is None
    assert dense_order((1, 3, 4), (4, 4, 1)) == (3, 1, 4)
    assert dense_order((1, 2), (1, 1)) == dense_order((2, 1), (1, 1)) == (2, 1)


def _copy_instructions(shape, strides):
    src = TensorSpec(shape, "bfloat16", strides, ("x", 0))
    ctx = LowerCtx(get_chip("trn2"), keep_operands=True)
    strided_copy(ctx, src, TensorSpec(shape, "bfloat16", None, ("o", 0)))
    return {e.name for e in ctx.b.build().emits}


def test_only_a_view_out_of_memory_order_copies_by_dma_transpose():
    # a step slice (x[:, ::2], x[::2, ::3] of [64, 96]) keeps its dims in memory order: a strided
    # read into SBUF, one descriptor per element, and a contiguous store; x.t() and a permute
    # that moved the last dim are transposes
    for shape, strides in [((64, 48), (96, 2)), ((32, 32), (192, 3))]:
        assert _copy_instructions(shape, strides) == {"dma_copy", "tensor_copy"}
    for shape, strides in [((96, 64), (1, 96)), ((4, 96, 16), (96 * 16, 1, 96))]:
        assert "dma_transpose" in _copy_instructions(shape, strides)
