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


def _independent_ops():
    """Per-tensor optimizer ops as the eager backend fuses them: one op over each of several
    parameters of different shapes and dtypes, no tensor shared (more DMAs than queues, so the
    round-robin wraps; a broadcast operand and a scalar operand included)."""
    ops = []
    for i, (shape, dt) in enumerate([((256, 256), "float32"), ((256,), "float32"),
                                     ((768, 256), "bfloat16"), ((64, 100), "float32")] * 3):
        a, b, o = T(shape, ("a", i), dt), T(shape, ("b", i), dt), T(shape, ("o", i), dt)
        ops += [OpSpec("aten::lerp_.Scalar", (a, b, 0.1), (o,)) if i % 3 == 0 else
                OpSpec("aten::addcdiv_", (a, b, T((1,), ("s", i), dt), 0.5), (o,)) if i % 3 == 1
                else OpSpec("aten::sqrt", (a,), (o,))]
    return ops


@pytest.mark.parametrize("lnc", [1, 2])
def test_independent_ops_are_their_own_programs_in_sequence(lnc, monkeypatch):
    """A sequence of ops sharing no tensor is timed from the ops' own programs put one after the
    other (api._concatenated_program): the same program, array for array, as building the
    sequence, so the same times."""
    import numpy as np
    from neuron_sim.hardware import get_chip
    from neuron_sim.lower import api
    chip = get_chip("trn2")
    ops = api.assign_ids(_independent_ops())
    alone = [lower_op(o, chip, lnc) for o in ops]
    cat = api._concatenated_program(ops, alone, chip, None)
    assert cat is not None and (cat.cols["stream"] >= 5 + 15).any()     # every queue used
    built = []
    measure = api._measure
    monkeypatch.setattr(api, "_measure", lambda ctx: (measure(ctx), built.append(ctx.result))[0])
    expect = api._program(ops, chip, lnc, None)
    prog = built[-1].program
    for k, col in prog.cols.items():
        assert col.dtype == cat.cols[k].dtype and np.array_equal(col, cat.cols[k]), k
    assert list(prog.opnames) == list(cat.opnames)
    assert np.array_equal(prog.dep_ptr, cat.dep_ptr) and np.array_equal(prog.dep_idx, cat.dep_idx)
    for a, b in zip(prog.order_edges(), cat.order_edges()):
        assert np.array_equal(a, b)
    assert api._concatenated(ops, alone, chip, lnc, None) == expect
    # through lower_sequence, with and without the shortcut
    from dataclasses import replace
    fast = replace(lower_sequence(ops, chip, lnc, standalone=alone), lower_s=0.0)
    monkeypatch.setattr(api, "_concatenated", lambda *a: None)
    assert replace(lower_sequence(ops, chip, lnc, standalone=alone), lower_s=0.0) == fast


def test_ops_sharing_a_tensor_are_built_as_one_program():
    """Dataflow (an output read later), aliasing inside an op and dead outputs change what the
    sequence emits: those sequences are built, never concatenated."""
    from neuron_sim.hardware import get_chip
    from neuron_sim.lower import api
    chip = get_chip("trn2")
    x, y, z = T((256, 256), "x"), T((256, 256), "y"), T((256, 256), "z")
    chained = [OpSpec("aten::sqrt", (x,), (y,)), OpSpec("aten::sqrt", (y,), (z,))]
    aliased = [OpSpec("aten::mul.Tensor", (x, x), (y,)),
               OpSpec("aten::sqrt", (z,), (T((256, 256), "w"),))]
    for ops in (chained, aliased):
        alone = [lower_op(o, chip) for o in ops]
        assert api._concatenated_program(ops, alone, chip, None) is None
    alone = [lower_op(o, chip) for o in _independent_ops()]
    assert api._concatenated_program(_independent_ops(), alone, chip, {("id", ("o", 0))}) is None
