"""Copies from (and into) transposed and permuted views, built in full: every access pattern lies
inside its tensor, and the chunks of a strided tensor have disjoint footprints (the dependency
tracker orders instructions by them; a DMA's descriptors and bytes come from them).

A strided operand is addressed as a timing-equivalent stand-in (context.hbm_pieces: runs with
one-element gaps), so these programs are not exact (semantics.why_unchecked refuses them); the
transposed clone of [1001, 128] reached element 64,191,127 of its 128,128-element source (its
innermost stride multiplied the whole chunk layout). Also the stand-in rows of the indirect
DMAs (movement._indirect_rows) of a table too small for their pattern."""

from math import prod

import numpy as np
import pytest

from neuron_sim import get_chip
from neuron_sim.interpreter import execute
from neuron_sim.lower import OpSpec, TensorSpec
from neuron_sim.lower.api import _with_ids
from neuron_sim.lower.context import LowerCtx
from neuron_sim.lower.registry import rule_for
from neuron_sim.program.ap import Memory


def _built(op, chip):
    """op's program built in full as semantics.run_lowered builds it; with the HBM tensors of
    its first input and its output."""
    op = _with_ids(op, lambda t, is_out, k: ("o" if is_out else "x", k))
    ctx = LowerCtx(get_chip(chip), 1, keep_operands=True, full=True, name=op.name)
    rule_for(op.name)(ctx, op)
    ctx.end_op()
    return ctx.b.build(), ctx.hbm(op.inputs[0]), ctx.hbm(op.outputs[0])


def _outside(program):
    """The accesses whose footprint leaves their tensor: (instruction, tensor, box)."""
    bad = []
    for e in program.emits:
        for ap in (*e.reads, *e.writes):
            t = ap.tensor
            p0, p1, lo, hi = ap.box()
            if t.memory == Memory.HBM:
                inside = lo >= 0 and hi <= prod(t.shape)
            else:
                inside = p0 >= t.partition_start and p1 <= t.partition_start + t.shape[0] \
                    and lo >= 0 and hi <= prod(t.shape[1:])
            if not inside:
                bad.append((e.name, t.name, ap.box()))
    return bad


def _transposed(shape):
    """A view of `shape` whose storage is the dims in reverse order (x.permute(reversed))."""
    return tuple(prod(shape[:i]) for i in range(len(shape)))


# (shape, strides of the source view): 2-D transposes with a short last chunk or row block,
# tiny ones, a 3-D reversal, a 3-D swap of the last two dims and a head permute (innermost dim
# contiguous: runs with gaps) and step slices (x[:, ::2], x[::2, ::3]: single elements with gaps)
VIEWS = [((1001, 128), (1, 1001)), ((128, 1001), (1, 128)), ((300, 77), (1, 300)),
         ((5, 3), (1, 5)), ((7, 130, 33), _transposed((7, 130, 33))),
         ((7, 130, 33), (130 * 33, 1, 130)), ((7, 130, 33), (33, 7 * 33, 1)),
         ((300, 501), (1002, 2)), ((150, 33), (2 * 99, 3))]


def _ops(shape, strides, dtype):
    x, y = TensorSpec(shape, dtype, strides), TensorSpec(shape, dtype)
    other = "float32" if dtype == "bfloat16" else "bfloat16"
    return [OpSpec("aten::clone", (x,), (y,)), OpSpec("neuron::copy_d2d", (x,), (y,)),
            OpSpec("aten::_to_copy", (x,), (TensorSpec(shape, other),)),
            OpSpec("aten::cat", ([x, y], 0), (TensorSpec((2 * shape[0],) + shape[1:], dtype),)),
            OpSpec("aten::copy", (TensorSpec(shape, dtype, strides), y),
                   (TensorSpec(shape, dtype, strides),)),
            OpSpec("aten::add.Tensor", (x, y), (y,))]


@pytest.mark.parametrize("chip", ["trn2", "trn1"])     # trn1: no dma_transpose
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape, strides", VIEWS)
def test_transposed_copies_stay_inside_their_tensors(shape, strides, dtype, chip):
    for op in _ops(shape, strides, dtype):
        program = _built(op, chip)[0]
        assert _outside(program) == [], (op.name, shape, strides)


def test_the_reported_transposed_clone_runs_through_the_interpreter():
    # the interpreter refused it: "an access of 'hbm0' reaches its element 64191127, outside
    # its 131072 elements"
    x = TensorSpec((1001, 128), "float32", (1, 1001))
    program, src, out = _built(OpSpec("aten::clone", (x,), (TensorSpec((1001, 128), "float32"),)),
                               "trn2")
    res = execute(program, {src.name: np.arange(src.shape[0], dtype=np.float32)})
    assert res[out.name].shape[0] >= 1001 * 128


@pytest.mark.parametrize("shape, strides", [((1001, 128), (1, 1001)), ((8, 1024, 64), (64, 512, 1)),
                                            ((16, 130, 33), _transposed((16, 130, 33))),
                                            ((4, 256, 100), (100, 400, 1))])
def test_a_strided_outputs_chunks_are_stored_to_disjoint_ranges(shape, strides):
    # a permuted destination (x.transpose(0, 1).copy_(y)) in FP32 chunks of whole runs (a
    # chunk cut inside a run is two DMAs whose footprints interleave): overlapping chunk
    # footprints ordered every store after the one before (the head permute's did: 15.2 ->
    # 13.0 us for [8, 1024, 64] on trn2)
    y = TensorSpec(shape, "float32")
    dst = TensorSpec(shape, "float32", strides)
    program, _, h = _built(OpSpec("aten::copy", (dst, y), (dst,)), "trn2")
    boxes = sorted(a.box()[2:] for e in program.emits for a in e.writes if a.tensor is h)
    assert len(boxes) > 1
    assert all(hi <= lo for (_, hi), (lo, _) in zip(boxes, boxes[1:]))


@pytest.mark.parametrize("rows, d", [(16, 8), (128, 16), (1000, 1), (30, 256)])
def test_indirect_rows_of_a_small_table_stay_inside_it(rows, d):
    # the stand-in pattern (row 3q + 7i for partition q's i-th row) passed the end of tables
    # of fewer than ~381 + 7r rows (test_rules' index_select: element 24,447 of 16,384)
    w, idx, dense = (TensorSpec((rows, d), "float32"), TensorSpec((500,), "int32"),
                     TensorSpec((500, d), "float32"))
    for op in (OpSpec("aten::embedding", (w, idx), (dense,)),
               OpSpec("aten::index_select", (w, 0, idx), (dense,)),
               OpSpec("aten::embedding_dense_backward", (dense, idx, rows, -1, False), (w,)),
               OpSpec("aten::index_add", (w, 0, idx, dense), (w,))):
        assert _outside(_built(op, "trn2")[0]) == [], op.name
