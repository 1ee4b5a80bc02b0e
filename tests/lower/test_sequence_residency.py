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


def test_a_scatter_into_a_zeroed_output_is_read_after_it_by_the_next_op():
    """nll_loss_backward and embedding_dense_backward zero their output on chip, then scatter
    into it with indirect DMA in HBM: the zeros are stored first and the resident copy
    released (LowerCtx.to_hbm), so the next op reads the scattered values; it read the
    resident zeros, and the scatter went to an HBM tensor nothing had zeroed."""
    import numpy as np
    import torch
    from neuron_sim.lower.semantics import check_lowered_sequence
    rng = np.random.default_rng(1)
    logp = torch.log_softmax(torch.tensor(rng.standard_normal((30, 64), np.float32)), 1)
    target = torch.tensor(rng.integers(0, 64, 30).astype(np.int32))
    g, tw = torch.tensor(0.7), torch.tensor(30.0)
    gin = torch.ops.aten.nll_loss_backward(g, logp, target.long(), None, 1, -100, tw)
    I = lambda s, id: TensorSpec(s, "int32", id=id)             # noqa: E731
    ops = [OpSpec("aten::nll_loss_backward", (T((), "g"), T((30, 64), "x"), I((30,), "t"),
                                              None, 1, -100, T((), "w")), (T((30, 64), "d"),)),
           OpSpec("aten::mul.Tensor", (T((30, 64), "d"), T((30, 64), "x")), (T((30, 64), "y"),))]
    ins = {"g": g.numpy(), "x": logp.numpy(), "t": target.numpy(), "w": tw.numpy()}
    check_lowered_sequence(ops, ins, {"d": gin.numpy(), "y": (gin * logp).numpy()},
                           live_outputs={"y"})
    grad = torch.tensor(rng.standard_normal((30, 64), np.float32))
    idx = torch.tensor(rng.integers(0, 50, 30).astype(np.int32))
    table = torch.ops.aten.embedding_dense_backward(grad, idx.long(), 50, -1, False)
    ops = [OpSpec("aten::embedding_dense_backward", (T((30, 64), "gr"), I((30,), "i"), 50, -1,
                                                     False), (T((50, 64), "tb"),)),
           OpSpec("aten::mul.Tensor", (T((50, 64), "tb"), T((50, 64), "tb")),
                  (T((50, 64), "sq"),))]
    check_lowered_sequence(ops, {"gr": grad.numpy(), "i": idx.numpy()},
                           {"tb": table.numpy(), "sq": (table * table).numpy()},
                           live_outputs={"sq"})


def test_a_vector_read_by_element_wise_ops_only_is_resident_in_the_flat_plan():
    """Decode-shaped [1, 16384] FP32 intermediates read only by element-wise ops: each copy is
    the flat plan [128, 128] (512 B per partition), so a and b stay resident together; sized
    for a row plan nobody reads ([1, 16384]: 64 KiB per partition each) b did not fit the
    resident budget next to a and was stored and read back."""
    s = (1, 16384)
    ops = [OpSpec("aten::exp", (T(s, "x"),), (T(s, "a"),)),
           OpSpec("aten::mul.Tensor", (T(s, "a"), T(s, "a")), (T(s, "b"),)),
           OpSpec("aten::add.Tensor", (T(s, "a"), T(s, "b")), (T(s, "c"),))]
    t = lower_sequence(ops, live_outputs={"c"})
    assert t.extra["spills"] == 0 and t.hbm_bytes == 2 * 16384 * 4
    ctx = sequence_ctx(ops, get_chip(None), 1, {("id", "c")})
    for op in ops[:2]:
        lower_into(ctx, rule_for(op.name), op)
    assert {k[1]: r.shape for k, r in ctx._resident.items()} == {"a": (128, 128),
                                                                 "b": (128, 128)}


def test_a_copy_read_by_a_row_op_is_laid_out_for_its_rows_too():
    """[1, 4096] read by layer_norm (one row of 4096 on one partition) and by a multiply: the
    copy serves both plans ([128, 4096]), and the sequence computes."""
    import numpy as np
    import torch
    from neuron_sim.lower.semantics import check_lowered_sequence
    s = (1, 4096)
    ops = [OpSpec("aten::exp", (T(s, "x"),), (T(s, "a"),)),
           OpSpec("aten::native_layer_norm", (T(s, "a"), [4096], T((4096,), "w"), None, 1e-5),
                  (T(s, "n"), T((1, 1), "m"), T((1, 1), "r"))),
           OpSpec("aten::mul.Tensor", (T(s, "a"), T(s, "n")), (T(s, "y"),))]
    ctx = sequence_ctx(ops, get_chip(None), 1, {("id", "y")})
    lower_into(ctx, rule_for(ops[0].name), ops[0])
    assert ctx._resident[("id", "a")].shape == (128, 4096)
    rng = np.random.default_rng(2)
    x = rng.standard_normal(s).astype(np.float32)
    w = rng.standard_normal(4096).astype(np.float32)
    a = torch.exp(torch.tensor(x))
    n = torch.nn.functional.layer_norm(a, [4096], torch.tensor(w), None, 1e-5)
    check_lowered_sequence(ops, {"x": x, "w": w}, {"y": (a * n).numpy()}, live_outputs={"y"})


def _in_place_broadcast():
    """exp -> mul_ by a [8, 16] operand in place (a broadcast plan of 4 rows of 128: [4, 128])
    -> add: (ops, inputs, expected outputs)."""
    import numpy as np
    s = (4, 8, 16)
    ops = [OpSpec("aten::exp", (T(s, "x"),), (T(s, "a"),)),
           OpSpec("aten::mul_.Tensor", (T(s, "a"), T((8, 16), "v")), (T(s, "a"),)),
           OpSpec("aten::add.Tensor", (T(s, "a"), T(s, "x")), (T(s, "y"),))]
    rng = np.random.default_rng(3)
    x = rng.standard_normal(s).astype(np.float32)
    v = rng.standard_normal((8, 16)).astype(np.float32)
    return ops, {"x": x, "v": v}, {"y": np.exp(x) * v + x}


def test_an_in_place_broadcast_writer_writes_the_copy_its_readers_read():
    """The copy of a (written flat by exp) is laid out for mul_'s broadcast plan too, so mul_
    writes it in place and add reads the products; mul_ wrote streaming tiles that were never
    stored (a dead intermediate) and add read exp's values from the stale copy."""
    from neuron_sim.lower.semantics import check_lowered_sequence
    ops, ins, want = _in_place_broadcast()
    check_lowered_sequence(ops, ins, want, live_outputs={"y"})


def test_an_in_place_writer_the_copy_cannot_serve_stores_it_and_releases_it(monkeypatch):
    """A resident copy not laid out for an in-place writer's plan (here: its readers' plans
    unknown) is stored and released at the writer's first chunk (LowerCtx.out_tile, as to_hbm
    does), so the writer's chunks go to HBM and the next op reads them there."""
    from neuron_sim.lower import api
    from neuron_sim.lower.semantics import check_lowered_sequence
    monkeypatch.setattr(api, "_row_reads", lambda op, chip, later: {})
    ops, ins, want = _in_place_broadcast()
    check_lowered_sequence(ops, ins, want, live_outputs={"y"})
