"""neuron_sim/lower/rules/movement.py: where the copies it emits read and write."""

from neuron_sim import get_chip
from neuron_sim.lower import TensorSpec
from neuron_sim.lower.context import LowerCtx
from neuron_sim.lower.rules.movement import strided_copy


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
