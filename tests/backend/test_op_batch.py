"""The queue's wire format to the cost model (issue 12) and its keys (issue 19): a drained batch
is a `_C.OpBatch` of `QueuedOp`s with named fields; ops are keyed in C++ when queued, and the
C++ dataflow of a fused group matches its Python reference (`cost.identity_pattern`)."""

import pytest
import torch

import torch_neuronx
from torch_neuronx import _C, _state
from torch_neuronx.cost import identity_pattern, pattern_ids


@pytest.fixture
def drained():
    """Captures the batches the queue drains while the test runs."""
    model = _state["cost_model"]
    seen = []

    def cost(batch, at_sync):
        seen.append(batch)
        return model(batch, at_sync)
    torch.neuron.synchronize()
    _C._set_cost_function(cost)
    yield seen
    torch.neuron.synchronize()
    from torch_neuronx import status
    _C._set_cost_function(status.on_first_drain(model))


def _ops(batches):
    return [op for b in batches for op in b]


def test_fields_are_named(drained):
    x = torch.arange(16.0, device="neuron").reshape(4, 4)
    y = x.t() * 2.5
    torch.neuron.synchronize()
    op = next(op for op in _ops(drained) if op.name == "aten::mul.Tensor")
    a, b = op.args
    assert (a.sizes, a.strides, a.dtype, a.on_neuron) == ((4, 4), (1, 4), torch.float32, True)
    assert a.storage != 0 and a.offset == 0
    assert (b.sizes, b.on_neuron) == ((), False)          # the scalar, a 0-dim CPU tensor
    assert op.outputs[0].sizes == (4, 4) and op.preset_ns == -1 and op.key >= 0
    seq, name, device, stream, args, outputs, preset_ns = op   # still a tuple, in field order
    assert (name, device, preset_ns) == ("aten::mul.Tensor", 0, -1)
    assert torch.equal(y.cpu(), torch.arange(16.0).reshape(4, 4).t() * 2.5)


def test_keys_follow_layout_not_place_or_float_scalars(drained):
    x = torch.ones(8, 8, device="neuron")
    for alpha in (1.5, 2.5):                  # floats never change a program: same key
        x = torch.add(x, x, alpha=alpha)
    x = torch.add(x, x, alpha=2)              # an int is part of the key
    x = x.t().contiguous() + 1                # ...and so are layouts
    torch.neuron.synchronize()
    adds = [op for op in _ops(drained) if op.name == "aten::add.Tensor"]
    assert adds[0].key == adds[1].key != adds[2].key
    assert len({op.key for op in adds}) == 3


def test_python_made_ops_key_as_queued(drained):
    x = torch.ones(8, 8, device="neuron")
    (x * 3).sum()
    torch.neuron.synchronize()
    queued = [op for op in _ops(drained) if op.name == "aten::mul.Tensor"][0]
    remade = _C.OpBatch([tuple(queued)])[0]   # a plain tuple in the field order
    assert remade.key == queued.key and remade.args == queued.args
    with pytest.raises(TypeError, match="argument 1 is a"):
        _C.OpBatch([(0, "aten::mul.Tensor", 0, 0, (queued.args[0], object()), (), -1)])


def test_cpp_pattern_matches_python_reference(drained):
    """A chain with in-place ops, views of one storage and a reused address: the C++ pattern
    the drain keys fused programs by equals the readable reference's ids."""
    torch_neuronx.set_adaptive_eager(True)
    try:
        x = torch.randn(32, 32, device="neuron")
        for _ in range(3):
            y = x * 2
            y.add_(1)
            z = y[:16] + y[16:]
            x = torch.cat([z, z]).relu()
        del y, z
        w = torch.randn(64, 16, device="neuron") * 3      # may reuse a freed address
        (w.sum() + x.sum()).item()
    finally:
        torch_neuronx.set_adaptive_eager(None)
    compared = linked = 0
    for batch in drained:
        n = len(batch)
        for lo in range(0, n, 7):
            group = [i for i in range(lo, min(n, lo + 12)) if batch[i].preset_ns < 0]
            ops = [batch[i] for i in group]
            pattern = batch.pattern(group)
            assert pattern_ids(ops, pattern) == identity_pattern(ops)
            compared += len(group)
            linked += sum(p != j for j, p in enumerate(pattern))
    assert compared > 20 and linked > 10      # inputs that are earlier outputs of the group


def test_drained_batch_survives_the_drain(drained):
    """The cost function may keep a batch (the profiler's advice does): it stays readable."""
    x = torch.ones(4, device="neuron") + 1
    torch.neuron.synchronize()
    kept = drained[-1]
    for _ in range(3):
        x = x + 1
        torch.neuron.synchronize()
    assert [op.name for op in kept][-1] == "aten::add.Tensor"
    assert _state["cost_model"].price(kept) == _state["cost_model"].price(list(kept))


def test_a_drain_of_seen_ops_makes_no_python_objects_per_op():
    """Issue 19: draining ops whose keys the cost model has seen builds no Python object per op,
    so it triggers no garbage collection (the tuple format made ~15 per op: ~85 collections of
    the youngest generation per 4,000 ops)."""
    import gc
    x = torch.zeros(16, device="neuron")
    for _ in range(100):
        x = x + 1
    torch.neuron.synchronize()                # keys seen, programs cached
    for _ in range(4000):                     # under the queue's bound: one drain below
        x = x + 1
    collections = []
    gc.callbacks.append(lambda phase, info: collections.append(info) if phase == "start" else 0)
    try:
        torch.neuron.synchronize()
    finally:
        gc.callbacks.pop()
    assert len(collections) <= 1, collections
    assert x.cpu()[0].item() == 4100.0
