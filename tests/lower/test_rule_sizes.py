"""Every op of a GPT training step lowers to a program at every size models use: hidden 256 to
4096, a few batch x sequence sizes, fp32 and bf16. An op whose rule fails falls back to the
roofline estimate and ends its AEE group (issue 19: the head-merge copy failed at hidden 2048
with a FreeSizeError, splitting a step's 39 launches into 114), so any fallback here fails.

The ops, shapes and strides are those a GPT step (examples/gpt) queues on the device, built
with the lowering API directly (no torch) so the sweep takes seconds."""

import pytest

from neuron_sim.lower import OpSpec, ProgramCache, TensorSpec
from neuron_sim.program.ap import row_major

HIDDEN = (256, 512, 1024, 2048, 4096)
BATCH_SEQ = ((1, 100), (4, 128), (4, 512))    # (batch, sequence): 100, 512, 2048 tokens
DTYPES = ("float32", "bfloat16")
HEAD_DIMS = (64, 128)
VOCAB = 1000                                   # not a multiple of 128, as real vocabularies


def _t(shape, dtype, strides=None):
    return TensorSpec(tuple(shape), dtype, strides)


def _permuted(shape, order, dtype):
    """The view of a contiguous tensor of `shape` permuted by `order` (x.permute(order))."""
    st = row_major(shape)
    return _t([shape[i] for i in order], dtype, [st[i] for i in order])


def gpt_step_ops(h, b, t, hd, dtype):
    """{label: OpSpec} of the device ops of one GPT training step (forward, backward, AdamW)."""
    nh, n, f = h // hd, b * t, 4 * h
    x, x3 = _t((b, t, h), dtype), _t((n, h), dtype)
    hid, w, wt = _t((n, f), dtype), _t((f, h), dtype), _t((h, f), dtype, (1, h))
    stats = _t((b, t, 1), "float32")
    vec = _t((h,), dtype)
    att = _t((b, nh, t, t), dtype)
    mask = _t((t, t), "bool")
    heads = _t((b, nh, t, hd), dtype)
    logits = _t((n, VOCAB), "float32")
    idx = _t((n,), "int64")
    scalar = TensorSpec((), "float64", on_device=False)
    ops = {
        "embedding": OpSpec("aten::index_select", (_t((VOCAB, h), dtype), 0, idx), (x3,)),
        "add": OpSpec("aten::add.Tensor", (x, x, 1), (x,)),
        "add_bcast": OpSpec("aten::add.Tensor", (x, _t((t, h), dtype), 1), (x,)),
        "layer_norm": OpSpec("aten::native_layer_norm", (x, (h,), vec, vec, 1e-5),
                             (x, stats, stats)),
        "layer_norm_bwd": OpSpec("aten::native_layer_norm_backward",
                                 (x, x, (h,), stats, stats, vec, vec, [True] * 3), (x, vec, vec)),
        "addmm_qkv": OpSpec("aten::addmm", (_t((3 * h,), dtype), x3,
                                            _t((h, 3 * h), dtype, (1, h)), 1, 1),
                            (_t((n, 3 * h), dtype),)),
        "addmm_fc": OpSpec("aten::addmm", (_t((f,), dtype), x3, wt, 1, 1), (hid,)),
        "addmm_out": OpSpec("aten::addmm", (vec, hid, _t((f, h), dtype, (1, f)), 1, 1), (x3,)),
        "mm_dx": OpSpec("aten::mm", (hid, w), (x3,)),
        "mm_dw": OpSpec("aten::mm", (_t((f, n), dtype, (1, f)), x3), (w,)),
        "mm_head": OpSpec("aten::mm", (x3, _t((h, VOCAB), dtype, (1, h))),
                          (_t((n, VOCAB), dtype),)),
        "bmm_qk": OpSpec("aten::bmm", (_t((b * nh, t, hd), dtype),
                                       _t((b * nh, hd, t), dtype, (t * hd, 1, hd))),
                         (_t((b * nh, t, t), dtype),)),
        "bmm_av": OpSpec("aten::bmm", (_t((b * nh, t, t), dtype), _t((b * nh, t, hd), dtype)),
                         (_t((b * nh, t, hd), dtype),)),
        "softmax": OpSpec("aten::_softmax", (att, -1, False), (att,)),
        "softmax_bwd": OpSpec("aten::_softmax_backward_data", (att, att, -1, dtype), (att,)),
        "masked_fill": OpSpec("aten::masked_fill_.Scalar", (att, mask, float("-inf")), (att,)),
        "scale": OpSpec("aten::mul.Tensor", (att, scalar), (att,)),
        "gelu": OpSpec("aten::gelu", (hid,), (hid,)),
        "gelu_bwd": OpSpec("aten::gelu_backward", (hid, hid), (hid,)),
        "bias_grad": OpSpec("aten::sum.dim_IntList", (hid, (0,), True, None),
                            (_t((1, f), dtype),)),
        "log_softmax": OpSpec("aten::_log_softmax", (logits, 1, False), (logits,)),
        "log_softmax_bwd": OpSpec("aten::_log_softmax_backward_data",
                                  (logits, logits, 1, "float32"), (logits,)),
        "nll_loss": OpSpec("aten::nll_loss_forward", (logits, idx, None, 1, -100),
                           (_t((), "float32"), _t((), "float32"))),
        "embedding_bwd": OpSpec("aten::embedding_dense_backward",
                                (x3, idx, VOCAB, -1, False), (_t((VOCAB, h), dtype),)),
        # the copies the attention reshapes make (q/k/v out of the fused qkv, heads merged)
        "copy_qkv_split": OpSpec("neuron::copy_d2d", (_t((b, nh, t, hd), dtype,
                                                         (t * 3 * h, hd, 3 * h, 1)),), (heads,)),
        "copy_head_merge": OpSpec("neuron::copy_d2d", (_permuted((b, nh, t, hd), (0, 2, 1, 3),
                                                                 dtype),),
                                  (_t((b, t, nh, hd), dtype),)),
        "copy_head_split": OpSpec("neuron::copy_d2d", (_permuted((b, t, nh, hd), (0, 2, 1, 3),
                                                                 dtype),), (heads,)),
        "copy_k_transposed": OpSpec("neuron::copy_d2d", (_t((b, nh, hd, t), dtype,
                                                            (t * 3 * h, hd, 1, 3 * h)),),
                                    (_t((b, nh, hd, t), dtype),)),
        "copy_weight_t": OpSpec("neuron::copy_d2d", (wt,), (_t((h, f), dtype),)),
        "cat_qkv_grad": OpSpec("aten::cat", ([x, _permuted((b, h, t), (0, 2, 1), dtype), x], 2),
                               (_t((b, t, 3 * h), dtype),)),
        # AdamW on the biggest weight
        "adam_lerp": OpSpec("aten::lerp_.Scalar", (w, w, 0.1), (w,)),
        "adam_addcmul": OpSpec("aten::addcmul_", (w, w, w, 0.001), (w,)),
        "adam_sqrt": OpSpec("aten::sqrt", (w,), (w,)),
        "adam_addcdiv": OpSpec("aten::addcdiv_", (w, w, w, -1e-3), (w,)),
        "zero_grad": OpSpec("aten::zero_", (w,), (w,)),
    }
    return ops


CASES = [pytest.param(h, b, t, dt, id=f"h{h}-bt{b}x{t}-{dt}")
         for h in HIDDEN for b, t in BATCH_SEQ for dt in DTYPES]
# ops whose lowering depends on the head size or on how the LNC=2 pair shares the work
HEAD_AND_PAIR_OPS = ("bmm", "softmax", "masked_fill", "scale", "copy", "cat")


@pytest.mark.parametrize("h,b,t,dtype", CASES)
def test_every_gpt_op_lowers_without_estimate(h, b, t, dtype):
    """Through the ProgramCache, as the eager backend times ops: every op at LNC=1 with the
    larger head size; the head- and pair-dependent ones also with the smaller one and LNC=2."""
    cache = ProgramCache()
    runs = [(label, hd, lnc) for label in gpt_step_ops(h, b, t, HEAD_DIMS[-1], dtype)
            for hd in HEAD_DIMS for lnc in (1, 2)
            if (hd, lnc) == (HEAD_DIMS[-1], 1) or label.startswith(HEAD_AND_PAIR_OPS)]
    ops = {hd: gpt_step_ops(h, b, t, hd, dtype) for hd in HEAD_DIMS}
    estimated = {}
    for label, hd, lnc in runs:
        op = ops[hd][label]
        tm = cache.lower_op(op, "trn2", lnc)
        if tm.estimated:
            estimated[f"{label} hd={hd} lnc={lnc}"] = cache.estimate_reasons.get(op.name)
        else:
            assert tm.total_ns > 0, (label, hd, lnc)
    assert not estimated, estimated


def test_a_chunk_that_is_not_whole_runs_is_moved_exactly():
    """The case behind issue 19: a [2048, 2048] head-merge copy streams chunks of 3277 elements
    per partition out of 512-element runs; it is two DMAs (6 whole runs, then 205 elements), so
    it costs about what the same copy costs when the chunk is whole runs."""
    from neuron_sim.lower import lower_op
    ops = gpt_step_ops(2048, 4, 512, 512, "bfloat16")
    odd = lower_op(ops["copy_head_merge"], "trn2", 1)
    ops = gpt_step_ops(2048, 4, 512, 256, "bfloat16")
    whole = lower_op(ops["copy_head_merge"], "trn2", 1)
    assert not odd.estimated and not whole.estimated
    assert odd.hbm_bytes == pytest.approx(whole.hbm_bytes)
    assert odd.total_ns == pytest.approx(whole.total_ns, rel=0.25)


@pytest.mark.parametrize("rows,cols", [(64, 5000), (1, 5000), (200, 9000), (3, 4097),
                                       (16, 70000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_norms_of_few_long_rows_lower(rows, cols, dtype):
    """Fewer rows than partitions with rows longer than a tile (processed in pieces): the
    weight and bias tiles follow the pieces' layout (a [64, 5000] FP32 layer_norm raised a
    PartitionError, 64 vs 128 partitions, and fell back to an estimate)."""
    x, vec = _t((rows, cols), dtype), _t((cols,), dtype)
    stats = _t((rows, 1), "float32")
    ops = {
        "layer_norm": OpSpec("aten::native_layer_norm", (x, (cols,), vec, vec, 1e-5),
                             (x, stats, stats)),
        "rms_norm": OpSpec("aten::rms_norm", (x, (cols,), vec, 1e-5), (x,)),
        "layer_norm_bwd": OpSpec("aten::native_layer_norm_backward",
                                 (x, x, (cols,), stats, stats, vec, vec, [True] * 3),
                                 (x, vec, vec)),
    }
    cache = ProgramCache()
    estimated = {}
    for label, op in ops.items():
        tm = cache.lower_op(op, "trn2", 1)
        if tm.estimated:
            estimated[label] = cache.estimate_reasons.get(op.name)
    assert not estimated, estimated
