"""semantics.run_lowered_sequence / check_lowered_sequence: the ONE program of a fused sequence
(lower_sequence's: intermediates resident in SBUF, dead ones never stored), built in full, run
through the ISA semantics and compared with torch on the CPU. What a single-op check cannot
see: SBUF residency between ops (LowerCtx.resident_ap) and the stores needs_store skips."""

import functools

import numpy as np
import pytest

from neuron_sim.hardware import get_chip
from neuron_sim.lower import OpSpec, TensorSpec
from neuron_sim.lower.api import sequence_ctx
from neuron_sim.lower.context import LowerCtx
from neuron_sim.lower.registry import RULES, rule_for
from neuron_sim.lower.replay import lower_into
from neuron_sim.lower.semantics import (Uncheckable, check_lowered_sequence,
                                        run_lowered_sequence)

torch = pytest.importorskip("torch")
F = torch.nn.functional
R, D, H = 128, 96, 128          # one output tile per matmul (M <= 128): exact


def T(shape, id, dtype="float32"):
    return TensorSpec(shape, dtype, id=id)


def _mlp():
    """linear -> gelu -> linear, residual add, layer_norm, softmax: (ops, inputs, every value
    by id, computed by torch)."""
    rng = np.random.default_rng(0)
    ins = {"x": rng.standard_normal((R, D)), "w1": rng.standard_normal((H, D)) * 0.1,
           "b1": rng.standard_normal(H), "w2": rng.standard_normal((D, H)) * 0.1,
           "g": rng.standard_normal(D), "b": rng.standard_normal(D)}
    ins = {k: v.astype(np.float32) for k, v in ins.items()}
    ops = [OpSpec("aten::linear", (T((R, D), "x"), T((H, D), "w1"), T((H,), "b1")),
                  (T((R, H), "h"),)),
           OpSpec("aten::gelu", (T((R, H), "h"), "tanh"), (T((R, H), "a"),)),
           OpSpec("aten::linear", (T((R, H), "a"), T((D, H), "w2")), (T((R, D), "y"),)),
           OpSpec("aten::add.Tensor", (T((R, D), "y"), T((R, D), "x")), (T((R, D), "r"),)),
           OpSpec("aten::native_layer_norm", (T((R, D), "r"), [D], T((D,), "g"), T((D,), "b"),
                                              1e-5),
                  (T((R, D), "n"), T((R, 1), "mean"), T((R, 1), "rstd"))),
           OpSpec("aten::_softmax", (T((R, D), "n"), -1, False), (T((R, D), "s"),))]
    t = {k: torch.tensor(v) for k, v in ins.items()}
    h = F.linear(t["x"], t["w1"], t["b1"])
    a = F.gelu(h, approximate="tanh")
    y = F.linear(a, t["w2"])
    r = y + t["x"]
    n, mean, rstd = torch.native_layer_norm(r, [D], t["g"], t["b"], 1e-5)
    vals = dict(h=h, a=a, y=y, r=r, n=n, mean=mean, rstd=rstd, s=torch.softmax(n, -1))
    return ops, ins, {k: v.numpy() for k, v in vals.items()}


@pytest.mark.parametrize("live", [None, {"s"}, {"s", "a", "r"}])
def test_mlp_sequence_matches_torch(live):
    ops, ins, vals = _mlp()
    got = run_lowered_sequence(ops, ins, live_outputs=live)
    assert set(got) == (set(vals) if live is None else live)
    for k, v in got.items():
        np.testing.assert_allclose(v, vals[k], rtol=1e-4, atol=1e-4, err_msg=k)
    # the timed program reads gelu's output as the second matmul's operand straight from SBUF,
    # in the element-wise chunk layout: timing only, so the check reads it from HBM
    assert got.read_in_other_layout == {"a": "aten::linear"}
    check_lowered_sequence(ops, ins, vals, live_outputs=live)


def _store_shifted(op_name, monkeypatch):
    """Break `op_name`'s rule: its stores go to p - 1 partitions (every offset moved)."""
    store = LowerCtx.store

    def shifted(self, t, tile, p, j, f, off=None):
        return store(self, t, LowerCtx.cols(tile, p - 1, 0, f), p - 1, j, f, off)
    rule = RULES[op_name]

    @functools.wraps(rule)
    def broken(ctx, op):
        monkeypatch.setattr(LowerCtx, "store", shifted)
        try:
            rule(ctx, op)
        finally:
            monkeypatch.setattr(LowerCtx, "store", store)
    monkeypatch.setitem(RULES, op_name, broken)


def test_a_broken_store_raises_naming_the_op(monkeypatch):
    ops, ins, vals = _mlp()
    _store_shifted("aten::native_layer_norm", monkeypatch)
    with pytest.raises(RuntimeError, match=r"op 4 of a sequence of 6: aten::native_layer_norm: "
                                           r"output 0 of its lowered program"):
        check_lowered_sequence(ops, ins, vals, live_outputs={"s", "n"})
    # without the intermediates' values, the op that wrote the differing output is named
    known = {k: vals[k] for k in ("s", "n")}
    with pytest.raises(RuntimeError, match=r"aten::native_layer_norm \(op 4 of a sequence of 6"):
        check_lowered_sequence(ops, ins, known, live_outputs={"s", "n"})


def test_a_non_exact_op_is_refused_with_its_reason():
    ops, ins, vals = _mlp()
    ops[1] = OpSpec("aten::asin", (T((R, H), "h"),), (T((R, H), "a"),))
    with pytest.raises(Uncheckable, match=r"aten::asin \(op 1 of a sequence of 6\): its lowering "
                                          r"cannot be checked: ScalarE has no table for it"):
        run_lowered_sequence(ops, ins)


def test_a_view_of_an_intermediate_is_refused():
    ops, ins, vals = _mlp()
    ops.insert(2, OpSpec("aten::view", (T((R, H), "a"), [R, H]), (T((R, H), "av"),)))
    ops[3] = OpSpec("aten::linear", (T((R, H), "av"), T((D, H), "w2")), (T((R, D), "y"),))
    with pytest.raises(Uncheckable, match=r"aten::linear \(op 3 .* reads a view of an inter"):
        run_lowered_sequence(ops, ins)


def _add_layer_norm(rows, C=D):
    """add -> layer_norm over `rows` rows of C: the sum's flat plan ([128, rows * C / 128]) is
    not layer_norm's row plan ([rows, C] for fewer than 128 rows)."""
    x, y = T((rows, C), "x"), T((rows, C), "y")
    return [OpSpec("aten::add.Tensor", (x, y), (T((rows, C), "r"),)),
            OpSpec("aten::native_layer_norm", (T((rows, C), "r"), [C], T((C,), "g"), None,
                                               1e-5),
                   (T((rows, C), "n"), T((rows, 1), "mean"), T((rows, 1), "rstd")))]


@pytest.mark.parametrize("rows, C", [(64, D), (100, D), (200, D), (3, 7), (50, 300)])
@pytest.mark.parametrize("live", [None, {"n"}])
def test_an_intermediate_read_in_another_plan_computes_the_sequence(rows, C, live):
    """The sum stays resident in a copy large enough for both plans and layer_norm reads it in
    place (LowerCtx._make_resident: a compiler writes it in its reader's layout): no HBM read of
    a tensor nothing stored. The program computes what torch does."""
    rng = np.random.default_rng(2)
    ins = {k: rng.standard_normal(s).astype(np.float32)
           for k, s in (("x", (rows, C)), ("y", (rows, C)), ("g", C))}
    t = {k: torch.tensor(v) for k, v in ins.items()}
    r = t["x"] + t["y"]
    n, mean, rstd = torch.native_layer_norm(r, [C], t["g"], None, 1e-5)
    want = {"r": r, "n": n, "mean": mean, "rstd": rstd}
    check_lowered_sequence(_add_layer_norm(rows, C), ins,
                           {k: v.numpy() for k, v in want.items()}, live_outputs=live)


def test_a_resident_intermediate_read_from_hbm_is_stored_first():
    """A reader whose plan the resident copy cannot serve reads HBM after LowerCtx.in_hbm
    stored the copy (once), so its load depends on that store."""
    ops = _add_layer_norm(64)
    ctx = sequence_ctx(ops, get_chip(None), 1, {("id", "n")}, keep_operands=True)
    lower_into(ctx, rule_for(ops[0].name), ops[0])
    r = ctx._resident[("id", "r")]
    ctx._resident[("id", "r")] = r.view((r.shape[0], r.shape[1] // 2))   # too small for [64, 96]
    lower_into(ctx, rule_for(ops[1].name), ops[1])
    prog = ctx.b.build()
    h = ctx._hbm[("id", "r")]
    stores = [i for i, e in enumerate(prog.emits) if any(a.tensor is h for a in e.writes)]
    loads = [i for i, e in enumerate(prog.emits) if any(a.tensor is h for a in e.reads)]
    assert len(stores) == 1 and loads
    assert all(stores[0] in prog.deps_of(i) for i in loads)


def test_in_place_and_foreach_sequences():
    """Eager-style sequences: ids from storages (an in-place op writes its input's id), the
    optimizer's foreach ops over lists streamed as one flat tensor. A list whose members an
    earlier op wrote one by one is refused (the program reads the list's own HBM tensor)."""
    rng = np.random.default_rng(1)
    p, g, q, h = T((R, D), "p"), T((R, D), "g"), T((D,), "q"), T((D,), "h")
    ins = {k: rng.standard_normal(s).astype(np.float32)
           for k, s in (("p", (R, D)), ("g", (R, D)), ("q", D), ("h", D))}
    in_place = [OpSpec("aten::add_.Tensor", (p, g), (p,)), OpSpec("aten::mul_.Tensor", (p, 0.5),
                                                                 (p,))]
    got = run_lowered_sequence(in_place, ins)
    np.testing.assert_allclose(got["p"], (ins["p"] + ins["g"]) * 0.5, rtol=1e-6)
    u, v = T((R, D), "u"), T((D,), "v")
    foreach = [OpSpec("aten::_foreach_mul", ([g, h], 0.25), (u, v)),
               OpSpec("aten::_foreach_add_", ([p, q], [u, v]), (p, q))]
    want = {"u": ins["g"] * 0.25, "v": ins["h"] * 0.25}
    want.update(p=ins["p"] + want["u"], q=ins["q"] + want["v"])
    got = run_lowered_sequence(foreach, ins)
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-6, err_msg=k)
    check_lowered_sequence(foreach, ins, want)
    with pytest.raises(Uncheckable, match="_foreach_mul .* an earlier op wrote in another form"):
        run_lowered_sequence([OpSpec("aten::mul_.Tensor", (g, 0.5), (g,))] + foreach, ins)


def test_a_wrong_resident_address_is_found_between_ops(monkeypatch):
    """A producer that writes its resident copy at mirrored chunk offsets (its stores, from
    that copy, still land right): each op agrees alone, the sequence does not."""
    out_tile = LowerCtx.out_tile

    def mirrored(self, t, p, cols, j, f, role="out", off=None):
        off = j * f if off is None else off
        return out_tile(self, t, p, cols, j, f, role, cols - f - off)
    s = (128, 1001)                             # two chunks: 501 and 500 columns
    x = np.random.default_rng(2).standard_normal(s).astype(np.float32)
    ops = [OpSpec("aten::exp", (T(s, "x"),), (T(s, "e"),)),
           OpSpec("aten::add.Tensor", (T(s, "e"), T(s, "x")), (T(s, "y"),))]
    vals = {"x": x, "e": np.exp(x), "y": np.exp(x) + x}
    check_lowered_sequence(ops, {"x": x}, vals, live_outputs={"y"})
    monkeypatch.setattr(LowerCtx, "out_tile", mirrored)
    with pytest.raises(RuntimeError, match=r"aten::add.Tensor \(op 1 of a sequence of 2: .*each "
                                           r"op whose values are known agrees alone"):
        check_lowered_sequence(ops, {"x": x}, vals, live_outputs={"y"})
