"""neuron_sim.lower: registry, name normalisation, coverage of the op families, cache,
representative repeats, sequence fusion, honest fallback, torch-freedom."""

import subprocess
import sys

import pytest

from neuron_sim.errors import NeuronSimError
from neuron_sim.lower import (RULES, OpSpec, ProgramCache, TensorSpec, estimate, has_rule,
                              lower_op, lower_sequence, lowers, normalize_name)
from neuron_sim.lower import api, context
from neuron_sim.lower import cache as cache_module


def T(shape, dtype="float32", strides=None, **kw):
    return TensorSpec(shape, dtype, strides, **kw)


@pytest.mark.parametrize("raw,norm", [
    ("aten::add.Tensor", "aten::add"), ("aten::add_.Tensor", "aten::add"),
    ("aten::add.out", "aten::add"), ("add.Tensor", "aten::add"), ("aten::zero_", "aten::zero"),
    ("aten::_foreach_mul_.Scalar", "aten::_foreach_mul"), ("aten::__and__.Tensor", "aten::__and__"),
    ("aten::_softmax", "aten::_softmax"), ("neuron::copy_d2d", "neuron::copy_d2d"),
])
def test_normalize_name(raw, norm):
    assert normalize_name(raw) == norm


def test_registering_twice_fails():
    with pytest.raises(NeuronSimError, match="registered twice"):
        @lowers("aten::mm")
        def other(ctx, op):
            pass
    assert RULES["aten::mm"].__name__ == "mm"


GPT_STEP_OPS = [
    OpSpec("aten::index_select", (T((256, 64)), 0, T((128,), "int64")), (T((128, 64)),)),
    OpSpec("aten::add.Tensor", (T((4, 32, 64)), T((32, 64)), 1), (T((4, 32, 64)),)),
    OpSpec("aten::native_batch_norm", (T((1, 128, 64)), None, None, None, None, True, 0.0, 1e-5),
           (T((1, 128, 64)), T((128,)), T((128,)))),
    OpSpec("aten::addcmul", (T((64,)), T((4, 32, 64)), T((64,)), 1), (T((4, 32, 64)),)),
    OpSpec("aten::addmm", (T((192,)), T((128, 64)), T((64, 192), strides=(1, 64)), 1, 1),
           (T((128, 192)),)),
    OpSpec("neuron::copy_d2d", (T((4, 4, 32, 16), strides=(6144, 16, 192, 1)),),
           (T((4, 4, 32, 16)),)),
    OpSpec("aten::bmm", (T((16, 32, 16)), T((16, 16, 32))), (T((16, 32, 32)),)),
    OpSpec("aten::mul.Tensor", (T((4, 4, 32, 32)), T((), "float64", on_device=False)),
           (T((4, 4, 32, 32)),)),
    OpSpec("aten::masked_fill_.Scalar", (T((4, 4, 32, 32)), T((32, 32), "bool"), float("-inf")),
           (T((4, 4, 32, 32)),)),
    OpSpec("aten::_softmax", (T((4, 4, 32, 32)), -1, False), (T((4, 4, 32, 32)),)),
    OpSpec("aten::gelu", (T((4, 32, 256)), "none"), (T((4, 32, 256)),)),
    OpSpec("aten::_log_softmax", (T((128, 256)), 1, False), (T((128, 256)),)),
    OpSpec("aten::nll_loss_forward", (T((128, 256)), T((128,), "int64"), None, 1, -100),
           (T(()), T(()))),
    OpSpec("aten::nll_loss_backward", (T(()), T((128, 256)), T((128,), "int64"), None, 1, -100,
                                       T(())), (T((128, 256)),)),
    OpSpec("aten::_log_softmax_backward_data", (T((128, 256)), T((128, 256)), 1, 6),
           (T((128, 256)),)),
    OpSpec("aten::native_layer_norm_backward",
           (T((4, 32, 64)), T((4, 32, 64)), (64,), T((4, 32, 1)), T((4, 32, 1)), T((64,)),
            T((64,)), None), (T((4, 32, 64)), T((64,)), T((64,)))),
    OpSpec("aten::sum.dim_IntList", (T((128, 64)), (0,), True, None), (T((1, 64)),)),
    OpSpec("aten::gelu_backward", (T((4, 32, 256)), T((4, 32, 256)), "none"), (T((4, 32, 256)),)),
    OpSpec("aten::_softmax_backward_data", (T((4, 4, 32, 32)), T((4, 4, 32, 32)), -1, 6),
           (T((4, 4, 32, 32)),)),
    OpSpec("aten::cat", ([T((4, 32, 64)), T((4, 32, 64), strides=(2048, 1, 32)), T((4, 32, 64))],
                         2), (T((4, 32, 192)),)),
    OpSpec("aten::embedding_dense_backward", (T((32, 64)), T((32,), "int64"), 32, -1, False),
           (T((32, 64)),)),
    OpSpec("aten::lerp_.Scalar", (T((256, 64)), T((256, 64)), 0.1), (T((256, 64)),)),
    OpSpec("aten::addcdiv_", (T((256, 64)), T((256, 64)), T((256, 64)), -0.01), (T((256, 64)),)),
    OpSpec("aten::sqrt", (T((256, 64)),), (T((256, 64)),)),
    OpSpec("aten::random_.from", (T((4, 32), "int64"), 0, 256, None), (T((4, 32), "int64"),)),
    OpSpec("aten::arange.start_out", (0, 32, 1, T((0,), "int64")), (T((32,), "int64"),)),
    OpSpec("aten::tril", (T((32, 32)), 0), (T((32, 32)),)),
    OpSpec("aten::native_dropout", (T((8, 128)), 0.1, True), (T((8, 128)), T((8, 128), "bool"))),
    OpSpec("aten::_fused_adamw_", ([T((256, 64)), T((64,))],) * 4 + ([], [T(())] * 2, 1e-3,
                                                                      0.9, 0.999, 0.01, 1e-8,
                                                                      False, False), ()),
    OpSpec("aten::_foreach_addcdiv_.ScalarList", ([T((64,))] * 3, [T((64,))] * 3,
                                                  [T((64,))] * 3, [0.1] * 3), ()),
    OpSpec("aten::convolution", (T((2, 8, 16, 16)), T((16, 8, 3, 3)), T((16,)), (1, 1), (1, 1),
                                 (1, 1), False, (0, 0), 1), (T((2, 16, 16, 16)),)),
    OpSpec("aten::convolution_backward",
           (T((2, 16, 16, 16)), T((2, 8, 16, 16)), T((16, 8, 3, 3)), None, (1, 1), (1, 1),
            (1, 1), False, (0, 0), 1, (True, True, False)),
           (T((2, 8, 16, 16)), T((16, 8, 3, 3)))),
    OpSpec("aten::linear", (T((4, 64), "bfloat16"), T((32, 64), "bfloat16")),
           (T((4, 32), "bfloat16"),)),
    OpSpec("aten::mse_loss", (T((64, 8)), T((64, 8)), 1), (T(()),)),
    OpSpec("aten::amax", (T((64, 128)), (1,), False), (T((64,)),)),
    OpSpec("aten::where.self", (T((64,), "bool"), T((64,)), T((64,))), (T((64,)),)),
    OpSpec("aten::_to_copy", (T((64, 64)),), (T((64, 64), "bfloat16"),)),
    OpSpec("aten::view", (T((64, 64)), (4096,)), (T((4096,)),)),
]


@pytest.mark.parametrize("op", GPT_STEP_OPS, ids=[o.name for o in GPT_STEP_OPS])
def test_op_lowers_to_a_program(op):
    assert has_rule(op.name)
    t = lower_op(op, "trn2", 2)
    assert not t.estimated
    if op.op == "aten::view":
        assert t.total_ns == 0 and t.instructions == 0
    else:
        assert t.total_ns > 1000 and t.instructions > 0     # at least one DMA latency


def test_unknown_op_is_estimated_and_reported():
    cache = ProgramCache()
    op = OpSpec("aten::frobnicate", (T((1024, 1024)),), (T((1024, 1024)),))
    t = cache.lower_op(op, "trn2", 1)
    assert t.estimated and t.instructions == 0
    assert "aten::frobnicate" in cache.estimate_reasons
    assert t.total_ns == pytest.approx(estimate(op, "trn2").total_ns)


def test_estimate_counts_an_ops_model_flops():
    """The estimate's compute is the op's model FLOPs (roofline.model_flops, which MFU counts
    too): linear's contraction is its input's last dimension, not the weight's first."""
    from neuron_sim.roofline import model_flops
    x, w, b = T((4096, 2048)), T((8192, 2048)), T((8192,))
    op = OpSpec("aten::linear", (x, w, b), (T((4096, 8192)),))
    assert estimate(op, "trn2").flops == 2.0 * 4096 * 8192 * 2048
    assert model_flops("linear", [x.shape, w.shape, b.shape], [(4096, 8192)]) == \
        estimate(op, "trn2").flops
    # a grouped matmul of MoE experts: [tokens, K] x [experts, K, N] -> [tokens, N]
    assert model_flops("_grouped_mm", [(512, 64), (8, 64, 128), (8,)], [(512, 128)]) == \
        2.0 * 512 * 128 * 64


def test_cache_hits_and_reports_lowering_time():
    cache = ProgramCache()
    op = OpSpec("aten::gelu", (T((512, 512)), "none"), (T((512, 512)),))
    a = cache.lower_op(op, "trn2", 1)
    b = cache.lower_op(op, "trn2", 1)
    assert a is b
    s = cache.stats()
    assert s["hits"] == 1 and s["misses"] == 1 and s["hit_rate"] == 0.5 and s["lower_s"] > 0
    assert 0 < s["lower_cpu_s"]
    assert cache.lower_op(op, "trn3", 1) is not a            # chip is part of the key


def test_one_lowering_per_opspec_under_several_caller_keys(monkeypatch):
    """The eager backend keys ops by raw descriptors; two keys describing the same OpSpec share
    one program (same Timing), and an OpSpec differing only in aliasing (ids) gets its own."""
    cache = ProgramCache()
    built = []
    monkeypatch.setattr(cache_module, "lower_op", lambda op, c, lnc: built.append(op) or
                        lower_op(op, c, lnc))
    op = OpSpec("aten::add.Tensor", (T((256, 256)), T((256, 256)), 1), (T((256, 256)),))
    a = cache.lower_op(lambda: op, "trn2", 1, key="raw-1")
    b = cache.lower_op(lambda: op, "trn2", 1, key="raw-2")
    assert a is b and len(built) == 1 and cache.stats()["misses"] == 2
    x = T((256, 256)).with_id("x")
    aliased = OpSpec("aten::add.Tensor", (x, x, 1), (T((256, 256)),))
    assert cache.lower_op(lambda: aliased, "trn2", 1, key="raw-3") is not a and len(built) == 2


def test_big_op_is_cheap_to_build():
    op = OpSpec("aten::add.Tensor", (T((8192, 8192)), T((8192, 8192)), 1), (T((8192, 8192)),))
    t = lower_op(op)
    assert t.extrapolated and t.instructions < 200


@pytest.mark.parametrize("op", [
    OpSpec("aten::add.Tensor", (T((2048, 2048)), T((2048, 2048)), 1), (T((2048, 2048)),)),
    OpSpec("aten::mm", (T((4096, 1024), "bfloat16"), T((1024, 2048), "bfloat16")),
           (T((4096, 2048), "bfloat16"),)),
    OpSpec("aten::_softmax", (T((32768, 512)), -1, False), (T((32768, 512)),)),
], ids=["add", "mm", "softmax"])
def test_extrapolation_matches_full_build(op, monkeypatch):
    est = lower_op(op)
    assert est.extrapolated
    monkeypatch.setattr(context, "REPEAT_CAP", 4096)
    monkeypatch.setattr(api, "REPEAT_CAP", 4096)
    monkeypatch.setattr(context, "RULE_CAPS", False)
    full = lower_op(op)
    assert not full.extrapolated
    assert est.total_ns == pytest.approx(full.total_ns, rel=0.03)
    assert est.hbm_bytes == pytest.approx(full.hbm_bytes, rel=0.02)
    p, q = est.program, full.program        # the representative's figures made the op's
    assert p.write_bytes + sum(p.read_bytes_by_arg.values()) == pytest.approx(est.hbm_bytes)
    for k in ("model_flops", "transpose_ns"):
        assert getattr(p, k) == pytest.approx(getattr(q, k), rel=0.03), k


def test_sequence_keeps_intermediates_in_sbuf():
    a, b, c, d = (T((128, 2048), id=k) for k in "abcd")
    seq = [OpSpec("aten::mul.Tensor", (a, a), (b,)), OpSpec("aten::gelu", (b, "none"), (c,)),
           OpSpec("aten::add.Tensor", (c, a, 1), (d,))]
    alone = sum(lower_op(o).total_ns for o in seq)
    fused = lower_sequence(seq)
    dead = lower_sequence(seq, live_outputs={"d"})
    assert fused.total_ns < alone
    assert dead.hbm_bytes < fused.hbm_bytes            # b and c never written to HBM
    # a is read by the first and the last op, d written; b and c live only in SBUF
    assert dead.hbm_bytes == pytest.approx(3 * 128 * 2048 * 4, rel=0.05)
    assert len(fused.per_op_ns) == 3


def test_sequence_without_ids_matches_by_layout():
    x, y = T((64, 512)), T((64, 512))
    seq = [OpSpec("aten::exp", (x,), (y,)), OpSpec("aten::mul.Tensor", (y, y), (y,))]
    fused = lower_sequence(seq)
    assert fused.hbm_bytes < sum(lower_op(o).hbm_bytes for o in seq)


def test_warm_up_next_to_lowering_changes_no_program():
    """The eager device runs warm_up() in a thread while the first ops may already lower: the
    programs lowered next to it are the ones lowered without it."""
    import threading
    a, b, c = (T((256, 1024), id=k) for k in "abc")
    w = T((1024, 512))
    seq = [OpSpec("aten::gelu", (a, "none"), (b,)), OpSpec("aten::mm", (b, w), (c,))]
    alone = [lower_op(o) for o in seq]
    fused = lower_sequence(seq)
    warm = threading.Thread(target=api.warm_up)
    warm.start()
    again = [lower_op(o) for o in seq]
    fused_again = lower_sequence(seq)
    warm.join()
    for x, y in zip(alone + [fused], again + [fused_again]):
        assert (x.total_ns, x.engine_ns, x.hbm_bytes, x.instructions) == \
            (y.total_ns, y.engine_ns, y.hbm_bytes, y.instructions)


def test_import_without_torch():
    code = "import sys; sys.modules['torch'] = None; import neuron_sim.lower; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


@pytest.mark.parametrize("op", [
    OpSpec("aten::exp", (T((1, 0, 3)),), (T((1, 0, 3)),)),
    OpSpec("aten::mm", (T((0, 5)), T((5, 10))), (T((0, 10)),)),
    OpSpec("aten::mm", (T((4, 0)), T((0, 10))), (T((4, 10)),)),
], ids=["empty-exp", "empty-mm", "k0-mm"])
def test_empty_tensors_lower(op):
    t = lower_op(op)
    assert not t.estimated and t.total_ns >= 0


def test_dead_but_spilled_intermediate_is_still_stored():
    # b is produced by a matmul (never SBUF-resident) and read by the next op: even though it is
    # not a graph output, it must go through HBM
    a = T((256, 256), "bfloat16", id="a")
    w = T((256, 256), "bfloat16", id="w")
    b = T((256, 256), "bfloat16", id="b")
    c = T((256, 256), "bfloat16", id="c")
    seq = [OpSpec("aten::mm", (a, w), (b,)), OpSpec("aten::gelu", (b, "none"), (c,))]
    t = lower_sequence(seq, live_outputs={"c"})
    nbytes = 256 * 256 * 2
    assert t.hbm_bytes >= 5 * nbytes * 0.99      # read a, w; write b; read b; write c
