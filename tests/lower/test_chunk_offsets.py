"""neuron_sim/lower/context.py: the chunks of a streamed op each cover their own elements."""

import pytest

from neuron_sim import get_chip
from neuron_sim.lower import TensorSpec
from neuron_sim.lower.context import LowerCtx
from neuron_sim.lower.rules.movement import strided_copy


def _hbm_boxes(ctx, name, side):
    """(f0, f1) of the HBM side of every `name` emit, per tensor id."""
    boxes = {}
    for e in ctx.b.build().emits:
        if e.name == name:
            for a in getattr(e, side):
                if a.tensor.name.startswith("hbm"):
                    boxes.setdefault(a.tensor.id, []).append(a.box()[2:])
    return boxes


def _tiles_exactly(boxes, n):
    """The boxes are disjoint, in order, and together cover [0, n)."""
    return [lo for lo, _ in boxes] == [0] + [hi for _, hi in boxes[:-1]] and boxes[-1][1] == n


@pytest.mark.parametrize("shape", [(128, 1001), (128, 1000), (96, 3001), (5, 100003)])
def test_streamed_chunks_read_and_write_disjoint_ranges_covering_the_tensor(shape):
    # [128, 1001] FP32 streams as chunks of 501 and 500 columns: the short last chunk starts at
    # 501 * 128, not 500 * 128 (where it overlapped chunk 0 and left the tensor's end untouched)
    x = TensorSpec(shape, "float32", None, ("x", 0))
    out = TensorSpec(shape, "float32", None, ("o", 0))
    ctx = LowerCtx(get_chip("trn2"), keep_operands=True)
    ctx.stream(out, [x], lambda s, d, p, f, j: ctx.b.tensor_copy(d[0], s[0]))
    # the flat plan is [p, ceil(numel / p)]: a numel that is no multiple of p rounds up (by < p)
    p, cols = ctx.flat_shape(out)
    n = p * cols
    reads, writes = _hbm_boxes(ctx, "dma_copy", "reads"), _hbm_boxes(ctx, "dma_copy", "writes")
    assert list(reads) == [ctx.hbm(x).id] and list(writes) == [ctx.hbm(out).id]
    assert len(reads[ctx.hbm(x).id]) == ctx.chunks(out, 2)[3] > 1
    assert _tiles_exactly(reads[ctx.hbm(x).id], n)
    assert _tiles_exactly(writes[ctx.hbm(out).id], n)


def test_transposed_copy_stores_each_chunk_at_its_own_columns():
    src = TensorSpec((128, 1001), "float32", (1, 128), ("x", 0))
    out = TensorSpec((128, 1001), "float32", None, ("o", 0))
    ctx = LowerCtx(get_chip("trn2"), keep_operands=True)
    strided_copy(ctx, src, out)
    writes = _hbm_boxes(ctx, "dma_copy", "writes")[ctx.hbm(out).id]
    assert len(writes) == 2 and _tiles_exactly(writes, 128 * 1001)


@pytest.mark.parametrize("shape, bshape",
                         [((128, 1000), (1000,)), ((100,), (1,)), ((96, 3001), (3001,))])
def test_a_broadcast_operand_loads_once_and_a_full_one_by_chunks(shape, bshape):
    # [96, 3001] is no multiple of 128 elements: its flat plan rounds up, it is still no broadcast
    x = TensorSpec(shape, "float32", None, ("x", 0))
    bias = TensorSpec(bshape, "float32", None, ("b", 0))
    out = TensorSpec(shape, "float32", None, ("o", 0))
    ctx = LowerCtx(get_chip("trn2"), keep_operands=True)
    ctx.stream(out, [x, bias], lambda s, d, p, f, j: ctx.b.tensor_tensor(d[0], s[0], s[1], "add"))
    reads = _hbm_boxes(ctx, "dma_copy", "reads")
    assert len(reads[ctx.hbm(bias).id]) == 1
    assert len(reads[ctx.hbm(x).id]) == ctx.chunks(out, 3)[3]
