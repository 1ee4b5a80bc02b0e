"""neuron_sim/lower/context.py: the chunks of a streamed op, and the row blocks of a row op
(rules/norm.py), each cover their own elements."""

import pytest

from neuron_sim import get_chip
from neuron_sim.lower import OpSpec, TensorSpec
from neuron_sim.lower.context import LowerCtx
from neuron_sim.lower.rules import norm
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


def _t(shape, name):
    return TensorSpec(shape, "float32", None, (name, 0))


def _ops(rows, C):
    """Row ops on [rows, C]: (rule, op, the [rows, C] tensors, the per-row [rows] outputs)."""
    x, y, g, o = _t((rows, C), "x"), _t((rows, C), "y"), _t((rows, C), "g"), _t((rows, C), "o")
    w, b, gw, gb = _t((C,), "w"), _t((C,), "b"), _t((C,), "gw"), _t((C,), "gb")
    mean, rstd, s, v = (_t((rows, 1), "mean"), _t((rows, 1), "rstd"), _t((rows,), "s"),
                        _t((rows,), "v"))
    return {
        "softmax": (norm.softmax, OpSpec("aten::_softmax", (x, -1, False), (o,)), [x, o], []),
        "log_softmax": (norm.softmax, OpSpec("aten::_log_softmax", (x, -1, False), (o,)),
                        [x, o], []),
        "softmax_backward": (norm.softmax,
                             OpSpec("aten::_softmax_backward_data", (g, y, -1, 6), (o,)),
                             [g, y, o], []),
        "log_softmax_backward": (norm.softmax,
                                 OpSpec("aten::_log_softmax_backward_data", (g, y, -1, 6), (o,)),
                                 [g, y, o], []),
        "layer_norm": (norm.layer_norm, OpSpec("aten::native_layer_norm",
                                               (x, (C,), w, b, 1e-5), (o, mean, rstd)),
                       [x, o], [mean, rstd]),
        "rms_norm": (norm.layer_norm, OpSpec("aten::rms_norm", (x, (C,), w, 1e-5), (o,)),
                     [x, o], []),
        "layer_norm_backward": (norm.layer_norm_backward, OpSpec(
            "aten::native_layer_norm_backward",
            (g, x, (C,), mean, rstd, w, b, (True, True, True)), (o, gw, gb)), [g, x, o], []),
        "sum": (norm.reduction, OpSpec("aten::sum.dim_IntList", (x, (1,), False, None), (s,)),
                [x], []),
        "var_mean": (norm.reduction, OpSpec("aten::var_mean.correction", (x, (1,), None, False),
                                            (v, s)), [x], []),
    }


# [640, 1024] FP32 on trn2: 5 rows per partition in blocks of 2 (the last holds 1);
# [1280, 128]: 10 rows per partition, blocks of 8 for the per-row norms (the last holds 2);
# [1000, 1024]: 8 rows per partition (the last partition's rounded up), blocks of 2, all full;
# [512, 256], [77, 768]: one block
@pytest.mark.parametrize("shape", [(640, 1024), (1280, 128), (1000, 1024), (512, 256), (77, 768)])
@pytest.mark.parametrize("name", list(_ops(1, 1)))
def test_row_blocks_read_and_write_disjoint_ranges_covering_the_rows(name, shape):
    rows, C = shape
    rule, op, full, per_row = _ops(rows, C)[name]
    ctx = LowerCtx(get_chip("trn2"), keep_operands=True)
    rule(ctx, op)
    # rows per partition round up to ceil(rows / p), as the flat plan rounds numel up to p * cols
    p = min(ctx.P, rows)
    per_part = -(-rows // p)
    reads, writes = _hbm_boxes(ctx, "dma_copy", "reads"), _hbm_boxes(ctx, "dma_copy", "writes")
    for t, n in [(t, p * per_part * C) for t in full] + [(t, p * per_part) for t in per_row]:
        boxes = {**reads, **writes}[ctx.hbm(t).id]
        assert _tiles_exactly(boxes, n), (t.id, boxes, n)


def test_a_short_last_block_computes_only_its_rows():
    # [640, 1024] softmax: blocks of 2, 2 and 1 rows per partition; exp runs once per row
    x, o = _t((640, 1024), "x"), _t((640, 1024), "o")
    ctx = LowerCtx(get_chip("trn2"), keep_operands=True)
    norm.softmax(ctx, OpSpec("aten::_softmax", (x, -1, False), (o,)))
    emits = ctx.b.build().emits
    assert sum(e.name == "activation_reduce" and e.params["op"] == "exp" for e in emits) == 5
    assert [e.reads[0].box()[3] - e.reads[0].box()[2] for e in emits
            if e.name == "tensor_reduce"] == [2048, 2048, 1024]
