"""The profiler's facts about a tensor end with the tensor: the queue names a tensor by its
storage's address, the allocator hands a freed storage to the next tensor and no free reaches
the profiler, so what it knew of the old tensor must not pass to the new one (issue: the demo
GPT's `inputs` MB and bf16 advice changed between identical runs, with where addresses fell)."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from torch_neuronx.cost import queued_op, tensor_desc
from torch_neuronx.profiling import hook
from torch_neuronx.profiling.autocast import autocast_batches
from torch_neuronx.profiling.compiled import _Later, graph_ops

ACT = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
F32 = torch.float32


def _last_record(name):
    return next(rec for n, _ns, rec in reversed(hook.SESSION.entries) if n == name)


def test_a_host_copy_into_a_freed_outputs_storage_reads_as_an_input():
    """Outputs of a device op are freed and host copies land in their storages, with their
    layout: an op reading such a copy reads input data, not the freed output."""
    x = torch.randn(64, 32).to("neuron")
    with profile(activities=ACT):
        for _ in range(20):
            hosts = [torch.randn(64, 32) for _ in range(16)]
            outputs = [x * 2 for _ in range(16)]
            torch.neuron.synchronize()
            freed = {a.untyped_storage()._cdata for a in outputs}
            del outputs
            copies = [h.to("neuron") for h in hosts]
            b = next((c for c in copies if c.untyped_storage()._cdata in freed), None)
            if b is not None:
                break
        else:
            pytest.fail("the allocator never handed a freed output's storage to a copy")
        b.neg()
        torch.neuron.synchronize()
    rec = _last_record("aten::neg")
    assert rec.dma_bytes.get("inputs", 0) > 0 and rec.dma_bytes.get("intermediates", 0) == 0


def test_a_read_through_another_view_of_an_output_is_an_intermediate():
    x = torch.randn(64, 32).to("neuron")
    with profile(activities=ACT):
        a = x * 2
        a.t().neg()
        torch.neuron.synchronize()
    rec = _last_record("aten::neg")
    assert rec.dma_bytes.get("intermediates", 0) > 0 and rec.dma_bytes.get("inputs", 0) == 0


def _t(storage, sizes=(128, 128), dtype=F32, on_neuron=True):
    strides = (sizes[1], 1) if len(sizes) == 2 else (1,)
    return tensor_desc(sizes, strides, dtype, storage, on_neuron=on_neuron)


def _rewritten(ops, phases):
    new, casts = autocast_batches([[queued_op(n, 0, 0, a, o) for n, a, o in ops]], [phases])
    return casts, [(op.name, [t.dtype for t in op.args if hasattr(t, "dtype")],
                    [t.dtype for t in op.outputs]) for op in new[0]]


def _after_softmax(writer, src):
    """softmax's output was cast up from bf16 (its backward casts its gradient back down) and
    the matmul's is bf16; the tensor `writer` makes next at the storage is float32."""
    return lambda s: ([("aten::mm", (_t(1), _t(2)), (_t(3),)),
                       ("aten::_softmax", (_t(3),), (_t(4),)),
                       (writer, src, (_t(s),)),
                       ("aten::_softmax_backward_data", (_t(8), _t(s)), (_t(10),)),
                       ("aten::add.Tensor", (_t(s), _t(5)), (_t(11),))],
                      ["forward"] * 3 + ["backward"] * 2)


STEPS = {
    "op after softmax": _after_softmax("aten::add.Tensor", (_t(6),)),
    "host copy after softmax": _after_softmax("neuron::copy_h2d", (_t(6, on_neuron=False),)),
    # a float32 gradient of the backward, then a cast to bf16 (a `.float()`'s backward) that
    # a matmul reads: the cast's output is bf16 wherever it lands
    "cast after a float32 tensor": lambda s: (
        [("aten::mul.Tensor", (_t(1), _t(2)), (_t(4),)),
         ("aten::mul.Tensor", (_t(4), _t(2)), (_t(5),)),
         ("neuron::copy_d2d", (_t(5),), (_t(s, dtype=torch.bfloat16),)),
         ("aten::mm", (_t(s, dtype=torch.bfloat16), _t(6, dtype=torch.bfloat16)), (_t(7),))],
        ["backward"] * 4),
    # a backward matmul's output (bf16 under autocast) and then a temporary of the optimizer:
    # the optimizer reads its own temporary, so no float32 gradient is cast for it
    "optimizer temporary after a gradient": lambda s: (
        [("aten::mm", (_t(1), _t(2)), (_t(4),)),
         ("aten::mul.Tensor", (_t(3), _t(5)), (_t(s),)),
         ("aten::add_.Tensor", (_t(6), _t(s)), (_t(6),))],
        ["backward", "optimizer", "optimizer"]),
}


@pytest.mark.parametrize("step", STEPS)
def test_autocast_rewrite_does_not_depend_on_reused_storages(step):
    """The bf16 advice's rewrite of a step is the same whether a freed storage (4 below) is
    handed to the next tensor or a fresh one (9) is."""
    assert _rewritten(*STEPS[step](4)) == _rewritten(*STEPS[step](9))


def test_compiled_graph_output_overwritten_after_the_graph_is_not_stored():
    """The compile advice stores a graph's output only when a later op reads it; a fill_ (the
    gradient seed) of a tensor handed the output's freed storage reads nothing of it."""
    def stored(s):
        items = [queued_op("aten::mul.Tensor", 0, 0, (_t(1), _t(2)), (_t(3),)),
                 queued_op("aten::mul.Tensor", 0, 0, (_t(3), _t(2)), (_t(5),)),
                 queued_op("aten::fill_.Scalar", 0, 0, (_t(s), 1.0), (_t(s),))]
        return graph_ops(items, 0, 2, _Later(items))[1]
    assert stored(3) == stored(9)
