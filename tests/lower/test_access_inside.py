"""The lowerings that reached outside their tensors, with the elements of each HBM access counted
exactly (the builder now refuses a pattern outside its tensor: program.ap.check_inside):
matmul's coalesced output store (one-element gaps between runs, and a short last M tile stored
as a whole one), a long-row norm's or reduction's per-row statistics (stored per row piece into
a tensor of rows), and a reduction over leading dims whose chunks are wider than its output
(every PSUM bank stored over the first elements, past the end)."""

import numpy as np
import pytest

from neuron_sim import get_chip
from neuron_sim.lower import OpSpec, TensorSpec
from neuron_sim.lower.context import LowerCtx
from neuron_sim.lower.registry import rule_for
from neuron_sim.program.ap import Memory


def _spec(shape, k, out=False):
    return TensorSpec(shape, "float32", None, ("o" if out else "x", k))


def _mm(a, b, o):
    return OpSpec("aten::bmm" if len(a) == 3 else "aten::mm", (_spec(a, 0), _spec(b, 1)),
                  (_spec(o, 0, True),))


def _sum(shape, dims, out):
    return OpSpec("aten::sum.dim_IntList", (_spec(shape, 0), dims, False), (_spec(out, 0, True),))


def _layer_norm(rows, cols):
    return OpSpec("aten::native_layer_norm", (_spec((rows, cols), 0), [cols], _spec((cols,), 1),
                                              _spec((cols,), 2), 1e-5),
                  (_spec((rows, cols), 0, True), _spec((rows, 1), 1, True),
                   _spec((rows, 1), 2, True)))


def _elements(ap) -> np.ndarray:
    """The flat (row-major) indices of the elements an HBM access pattern reaches."""
    t = ap.tensor
    idx = np.array([ap.p_start * int(np.prod(t.shape[1:])) + ap.offset])
    for n, step in ((ap.p_size, ap.p_stride),) + tuple(ap.dims):
        idx = (idx[:, None] + np.arange(n) * step).reshape(-1)
    return idx


def _program(op):
    """op's program built in full (every block), with its operands; and its context."""
    ctx = LowerCtx(get_chip("trn2"), 1, keep_operands=True, full=True, name=op.name)
    rule_for(op.name)(ctx, op)
    ctx.end_op()
    return ctx, ctx.b.build()


def _hbm_accesses(program):
    for e in program.emits:
        for ap in e.reads + e.writes:
            if ap.memory == Memory.HBM:
                yield e, ap


# mm [256, 512] x [512, 256] and [1024, 256] x [256, 256]: whole M tiles, coalesced; [300, 256]
# and bmm [2, 300, 64] x [2, 64, 256]: a short last M tile; sums over leading dims whose chunk
# (512, 1536 columns) is wider than the output (256, 768 elements)
STORES = {
    "mm whole tiles": _mm((256, 512), (512, 256), (256, 256)),
    "mm 1024 rows": _mm((1024, 256), (256, 256), (1024, 256)),
    "mm short tile": _mm((300, 256), (256, 256), (300, 256)),
    "bmm short tile": _mm((2, 300, 64), (2, 64, 256), (2, 300, 256)),
    "sum dim 0 narrow": _sum((1024, 256), (0,), (256,)),
    "sum dim 0 banks": _sum((1024, 768), (0,), (768,)),
}
LONG_ROWS = {
    "layer_norm 64 x 5000": _layer_norm(64, 5000),
    "layer_norm 3 x 9000": _layer_norm(3, 9000),
    "sum last dim 3 x 9000": _sum((3, 9000), (1,), (3,)),
}


@pytest.mark.parametrize("op", list((STORES | LONG_ROWS).values()),
                         ids=list(STORES | LONG_ROWS))
def test_every_hbm_access_lies_inside_its_tensor(op):
    _, program = _program(op)
    for e, ap in _hbm_accesses(program):
        idx = _elements(ap)
        assert idx.min() >= 0 and idx.max() < np.prod(ap.tensor.shape), (e.name, ap)


@pytest.mark.parametrize("op", list(STORES.values()), ids=list(STORES))
def test_the_output_stores_write_each_element_once(op):
    ctx, program = _program(op)
    out = op.outputs[0]
    h = ctx.hbm(out)
    written = np.concatenate([_elements(ap) for e, ap in _hbm_accesses(program)
                              if e.name == "dma_copy" and ap in e.writes and ap.tensor is h])
    counts = np.bincount(written, minlength=h.shape[0])
    assert (counts[:out.numel] == 1).all() and not counts[out.numel:].any()
