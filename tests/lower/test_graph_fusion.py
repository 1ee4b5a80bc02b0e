"""What a whole graph given to the compiler gains over eager groups, at the lowering level:
resident intermediates are released after their last reader (so a long chain keeps every
intermediate on chip, not only the first few that fit), and runs of element-wise ops over
tensors too big to stay resident (an optimizer's foreach chain) are fused as loops, each chunk
going through the whole chain while it is in SBUF."""

import pytest

from neuron_sim.lower import OpSpec, TensorSpec, lower_op, lower_sequence

MB = 1 << 20


def T(shape, id, dtype="float32"):
    return TensorSpec(shape, dtype, id=id)


def test_a_long_chain_keeps_every_intermediate_on_chip():
    # 24 element-wise ops on 2 MiB tensors: more intermediates than resident SBUF holds at once
    n = 24
    xs = [T((512, 1024), f"t{i}") for i in range(n + 1)]
    seq = [OpSpec("aten::mul.Tensor", (xs[i], 1.5), (xs[i + 1],)) for i in range(n)]
    dead = lower_sequence(seq, live_outputs={f"t{n}"})
    # read the input once, write the last result once
    assert dead.hbm_bytes == pytest.approx(2 * 2 * MB, rel=0.05)
    alone = sum(lower_op(o).total_ns for o in seq)
    assert dead.total_ns < alone / 2      # VectorE-bound now, DMA-bound alone


def _adam_chain(numel, k=8):
    """An AdamW-like foreach chain over k parameters of numel elements each."""
    def lst(tag):
        return [T((numel,), (tag, i)) for i in range(k)]
    p, g, m, v = lst("p"), lst("g"), lst("m"), lst("v")
    m1, v1, v2, d, u, p1 = lst("m1"), lst("v1"), lst("v2"), lst("d"), lst("u"), lst("p1")
    ops = [
        OpSpec("aten::_foreach_lerp.Scalar", (m, g, 0.1), tuple(m1)),
        OpSpec("aten::_foreach_mul.Scalar", (v, 0.999), tuple(v1)),
        OpSpec("aten::_foreach_addcmul.Scalar", (v1, g, g, 0.001), tuple(v2)),
        OpSpec("aten::_foreach_sqrt", (v2,), tuple(d)),
        OpSpec("aten::_foreach_div.List", (m1, d), tuple(u)),
        OpSpec("aten::_foreach_add.List", (p, u), tuple(p1)),
    ]
    live = {t.id for t in m1 + v2 + p1}
    return ops, live


@pytest.mark.parametrize("numel", [1 << 16, 1 << 20])   # lists of 2 MiB (resident), 32 MiB (loop)
def test_optimizer_foreach_chain_runs_as_one_fused_loop(numel):
    ops, live = _adam_chain(numel)
    t = lower_sequence(ops, live_outputs=live)
    passes = t.hbm_bytes / (8 * numel * 4)
    # p, m, v read once, g twice (inputs are not kept on chip between their readers), m, v, p
    # written once: 8 passes (each op alone: 16)
    assert passes == pytest.approx(8, rel=0.05), passes
    alone = [lower_op(o) for o in ops]
    assert sum(a.hbm_bytes for a in alone) / (8 * numel * 4) == pytest.approx(16, rel=0.05)
    assert t.total_ns < 0.7 * sum(a.total_ns for a in alone)   # VectorE-bound now
    # the busy time the per-engine report shows: DMA (HBM) busy shrinks with the traffic
    assert t.engine_ns["DMA"] < 0.6 * sum(a.engine_ns["DMA"] for a in alone)
