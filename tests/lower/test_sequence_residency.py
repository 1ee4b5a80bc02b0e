"""lower_sequence's resident intermediates as the timed program uses them: a matmul reads each K
tile of a resident operand from its own columns, and a resident intermediate is no spill."""

from neuron_sim.hardware import get_chip
from neuron_sim.lower import OpSpec, TensorSpec, lower_sequence
from neuron_sim.lower.api import sequence_ctx
from neuron_sim.lower.registry import rule_for
from neuron_sim.lower.replay import lower_into


def T(shape, id):
    return TensorSpec(shape, "float32", id=id)


def test_each_k_tile_of_a_resident_operand_is_read_from_its_own_columns():
    """gelu's [256, 64] output, resident, is mm's B operand: K = 256 is two K tiles, which read
    two column ranges of the resident copy (not both the first)."""
    ops = [OpSpec("aten::gelu", (T((256, 64), "b"),), (T((256, 64), "a"),)),
           OpSpec("aten::mm", (T((64, 256), "x"), T((256, 64), "a")), (T((64, 64), "y"),))]
    ctx = sequence_ctx(ops, get_chip(None), 1, {("id", "y")}, keep_operands=True)
    for i, op in enumerate(ops):
        lower_into(ctx, rule_for(op.name), op)
        if i == 0:
            res = ctx._resident[("id", "a")]
    prog = ctx.b.build()
    reads = {a.offset for e in prog.emits if e.name == "nc_matmul" for a in e.reads
             if a.tensor is res}
    assert len(reads) == 2, reads


def test_a_resident_intermediate_is_not_counted_as_spilled():
    s = (128, 1024)
    ops = [OpSpec("aten::exp", (T(s, "x"),), (T(s, "e"),)),
           OpSpec("aten::add.Tensor", (T(s, "e"), T(s, "x")), (T(s, "y"),))]
    t = lower_sequence(ops, live_outputs={"y"})
    assert t.extra["spills"] == 0 and t.extra["spill_bytes"] == 0


def test_a_rule_reading_hbm_directly_stores_a_resident_input_first():
    """addmm reads its bias row straight from HBM (a partition-broadcast DMA): a bias made by
    the op before it, resident and not live, is stored first (LowerCtx.in_hbm), so the program
    computes the sequence; it read an HBM tensor nothing wrote."""
    import numpy as np
    import torch
    from neuron_sim.lower.semantics import check_lowered_sequence
    ops = [OpSpec("aten::add.Tensor", (T((256,), "b0"), T((256,), "c")), (T((256,), "b"),)),
           OpSpec("aten::addmm", (T((256,), "b"), T((128, 64), "x"), T((64, 256), "w")),
                  (T((128, 256), "y"),))]
    rng = np.random.default_rng(0)
    ins = {k: rng.standard_normal(s).astype(np.float32)
           for k, s in (("b0", 256), ("c", 256), ("x", (128, 64)), ("w", (64, 256)))}
    t = {k: torch.tensor(v) for k, v in ins.items()}
    b = t["b0"] + t["c"]
    want = {"b": b.numpy(), "y": torch.addmm(b, t["x"], t["w"]).numpy()}
    check_lowered_sequence(ops, ins, want, live_outputs={"y"})
