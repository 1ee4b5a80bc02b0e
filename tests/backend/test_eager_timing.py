"""Eager ops timed by lowered ISA programs (issue 5): no estimated ops in a GPT-style training
step, Adaptive Eager Execution (fusion between sync points, switches), the breakdown API and the
program cache."""

import os
import sys

import pytest
import torch

import torch_neuronx
from torch_neuronx import _state

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt"))
from gpt_model import GPTConfig, fresh, train_step  # noqa: E402


@pytest.fixture
def model():
    return _state["cost_model"]


@pytest.fixture(autouse=True)
def _restore_aee():
    torch.neuron.synchronize()
    yield
    torch.neuron.synchronize()
    torch_neuronx.set_adaptive_eager(None)
    torch.use_deterministic_algorithms(False)


def _small_gpt():
    return fresh(GPTConfig(vocab_size=128, n_layer=1, n_head=2, n_embd=64, block_size=32), 4)


def _step_ns(state):
    m, opt, x, y = state
    a, b = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    a.record()
    loss = train_step(m, opt, x, y)
    b.record()
    loss.item()
    return a.elapsed_time(b) * 1e6


def test_gpt_step_is_timed_by_lowered_programs():
    state = _small_gpt()
    _step_ns(state)                                  # optimizer state created, programs lowered
    torch_neuronx.reset_timing_stats()
    ns = _step_ns(state)
    b = torch_neuronx.timing_breakdown()
    assert ns > 0 and b["total_ns"] > 0
    estimated = {k: v["estimated"] for k, v in b["ops"].items() if v["estimated"]}
    assert estimated == {}, f"ops timed by the roofline estimate: {estimated}"
    assert {"aten::mm", "aten::bmm"} & set(b["ops"])
    assert b["engine_ns"]["TensorE"] > 0 and b["engine_ns"]["DMA"] > 0 and b["hbm_bytes"] > 0
    report = torch_neuronx.timing_report()
    assert "program cache" in report and "estimated (roofline, no lowering rule): none" in report


def test_steady_state_is_cache_lookups(model):
    state = _small_gpt()
    _step_ns(state)
    _step_ns(state)
    before = model.cache.stats()
    _step_ns(state)
    after = model.cache.stats()
    assert after["misses"] == before["misses"]
    assert after["hits"] > before["hits"]


def test_aee_fuses_and_is_faster():
    state = _small_gpt()
    torch_neuronx.set_adaptive_eager(True)
    _step_ns(state)
    torch_neuronx.reset_timing_stats()
    fused = _step_ns(state)
    b = torch_neuronx.timing_breakdown()
    assert b["fused_groups"] > 0 and b["fused_ops"] > b["fused_groups"]
    torch_neuronx.set_adaptive_eager(False)
    torch_neuronx.reset_timing_stats()
    unfused = _step_ns(state)
    b2 = torch_neuronx.timing_breakdown()
    assert b2["fused_groups"] == 0 and b2["launches"] > b["launches"]
    assert fused < unfused


def _chain(n=4):
    x = torch.ones(256, 256, device="neuron")
    for _ in range(n):
        x = x * 1.5 + 1.0
    return x


def _groups(fn):
    torch.neuron.synchronize()
    torch_neuronx.reset_timing_stats()
    fn()
    torch.neuron.synchronize()
    return torch_neuronx.timing_breakdown()


def test_sync_is_a_fusion_boundary():
    torch_neuronx.set_adaptive_eager(True)
    whole = _groups(lambda: _chain(4))

    def split():
        x = _chain(2)
        x.sum().item()                         # .item(): a sync point, as printing is
        _chain(2)
    halves = _groups(split)
    assert whole["fused_groups"] == 1
    assert halves["fused_groups"] >= 2


def test_deterministic_algorithms_disable_aee():
    torch_neuronx.set_adaptive_eager(True)
    torch.use_deterministic_algorithms(True)
    b = _groups(lambda: _chain(4))
    assert b["fused_groups"] == 0 and not b["aee"]


def test_env_var_disables_aee(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_ENABLE_CONCATENATION", "0")
    b = _groups(lambda: _chain(4))
    assert b["fused_groups"] == 0
    monkeypatch.setenv("TORCH_NEURONX_ENABLE_CONCATENATION", "1")
    b = _groups(lambda: _chain(4))
    assert b["fused_groups"] == 1


def test_estimated_ops_are_listed(model):
    from neuron_sim.lower import RULES
    x = torch.randn(64, 64, device="neuron")
    before = dict(torch_neuronx.estimated_ops())
    y = torch.linalg.qr(x)                     # no lowering rule: a documented estimate
    torch.neuron.synchronize()
    after = torch_neuronx.estimated_ops()
    new = {k: v for k, v in after.items() if v > before.get(k, 0)}
    assert new, "an op without a rule must be reported as estimated"
    assert all(k.split(".")[0].replace("_", "") not in RULES for k in new)
    del y


def test_an_op_that_cannot_be_described_is_timed_by_its_bytes(model, monkeypatch):
    """A descriptor the cost model cannot describe as an OpSpec: the op still runs, timed by the
    bytes-only roofline (neuron_sim.lower.estimate_bytes), listed as estimated with the reason."""
    import torch_neuronx.cost as cost

    def broken(op, **kw):
        raise ValueError("undescribable descriptor")
    monkeypatch.setattr(cost, "op_spec", broken)
    torch_neuronx.set_adaptive_eager(False)
    x = torch.randn(37, 41, device="neuron")      # a layout no other test queues
    torch.neuron.synchronize()
    torch_neuronx.reset_timing_stats()
    y = x * 3.0
    torch.neuron.synchronize()
    assert torch.equal(y.cpu(), x.cpu() * 3.0)
    s = torch_neuronx.timing_breakdown()["ops"]["aten::mul.Tensor"]
    assert s["estimated"] == 1
    moved = 2 * 37 * 41 * 4 + 4                    # x, y and the scalar, a 0-dim tensor
    c = model.chip
    expected = (model.launch_ns + 1e9 * moved / (c.hbm_bytes_per_s_per_core * model.lnc)
                + 2e9 * c.dma_fixed_latency_s)
    assert s["ns"] == pytest.approx(expected, abs=1)
    assert s["hbm_bytes"] == moved
    assert "undescribable descriptor" in model.cache.estimate_reasons["aten::mul.Tensor"]


def test_numerics_unchanged_by_aee():
    torch_neuronx.set_adaptive_eager(True)
    a = _chain(4).cpu()
    torch_neuronx.set_adaptive_eager(False)
    b = _chain(4).cpu()
    assert torch.equal(a, b)


def _tensor(shape=(256, 256), storage=1):
    """A tensor as the queue describes it (torch_neuronx._C.TensorDesc's fields: sizes, strides,
    dtype, on_neuron, storage, offset)."""
    return (shape, (shape[1], 1), torch.float32, True, storage, 0)


def _desc(seq, name, shape=(256, 256), stream=0, preset=-1, device=0, ins=(1, 1), out=1):
    a, b = (_tensor(shape, s) for s in ins)
    return (seq, name, device, stream, (a, b, 1), (_tensor(shape, out),), preset)


def test_cost_function_batches(model):
    """The drain's contract, on synthetic descriptors: presets are kept, views cost nothing,
    fused groups end at AEE_MAX_OPS, at a stream change and at an unfusable op."""
    from neuron_sim.lower import AEE_MAX_OPS
    torch_neuronx.set_adaptive_eager(True)
    model.reset_stats()
    batch = [_desc(i, "aten::add.Tensor") for i in range(AEE_MAX_OPS + 3)]
    batch.append(_desc(100, "aten::add.Tensor", stream=1))
    batch.append(_desc(101, "neuron::collective", preset=12345))
    batch.append((102, "aten::view", 0, 0, (_tensor(), (65536,)), (_tensor((65536, 1)),), -1))
    out = model(batch, True)
    assert len(out) == len(batch)
    assert out[-2] == 12345 and out[-1] == 0
    b = model.breakdown()
    # groups: AEE_MAX_OPS ops, 3 ops (then the stream changes), 1 op on stream 1 (single: no
    # fusion); the preset and the view launch nothing
    assert b["fused_groups"] == 2 and b["fused_ops"] == AEE_MAX_OPS + 3
    assert b["launches"] == 3
    assert all(ns > 0 for ns in out[:-1])


def test_a_drain_lowers_with_the_collector_paused_and_restores_it(model, monkeypatch):
    """A drain pauses the garbage collector from its first program-cache miss to its end
    (cost._GcPause: the collection the misses set off runs once, after the drain); a drain
    whose ops are all cached never touches it."""
    import gc
    from torch_neuronx import cost
    if model._warm_up is not None:
        model._warm_up.join(120)             # its own pause would hide ours
    torch_neuronx.set_adaptive_eager(True)
    pauses, enabled_in_lowering = [], []
    paused_gc, lower_op = cost.paused_gc, model.cache.lower_op

    def counted():
        pauses.append(1)
        return paused_gc()

    def spied(*a, **k):
        enabled_in_lowering.append(gc.isenabled())
        return lower_op(*a, **k)
    monkeypatch.setattr(cost, "paused_gc", counted)
    monkeypatch.setattr(model.cache, "lower_op", spied)
    batch = [_desc(i, "aten::add.Tensor", shape=(96, 40 + i)) for i in range(3)]
    assert gc.isenabled()
    model(batch, True)
    assert len(pauses) == 1 and enabled_in_lowering == [False] * 3 and gc.isenabled()
    model(batch, True)                       # the same ops again: cache hits only
    assert len(pauses) == 1 and len(enabled_in_lowering) == 3 and gc.isenabled()


def test_a_fused_group_is_described_as_its_ops_are(model, monkeypatch):
    """A fused group's OpSpecs are made from each op key's spec, made once and tagged with the
    group's ids (cost._group_specs): the same OpSpecs, ids included, as describing every op of
    the group from its descriptors (fused_specs of pattern_ids)."""
    from torch_neuronx import cost
    torch_neuronx.set_adaptive_eager(True)
    described = []
    real = cost._group_specs

    def checked(batch, group, costs):
        specs = real(batch, group, costs)
        ops = [batch[i] for i in group]
        assert specs == cost.fused_specs(ops, cost.pattern_ids(ops, batch.pattern(group)))
        described.append(len(specs))
        return specs
    monkeypatch.setattr(cost, "_group_specs", checked)
    shape = (96, 72)                         # layouts no other test lowers: every key is new
    t = _tensor(shape, 11)
    cat = (3, "aten::cat", 0, 0, ([_tensor(shape, 12), _tensor(shape, 13)], 0),
           (_tensor((192, 72), 14),), -1)
    batch = [_desc(0, "aten::add.Tensor", shape, ins=(1, 2), out=3),
             _desc(1, "aten::mul.Tensor", shape, ins=(3, 4), out=5),   # reads op 0's output
             _desc(2, "aten::add.Tensor", shape, ins=(5, 5), out=6),   # op 0's key again
             cat, (4, "aten::mul.Tensor", 0, 0, (t, t, 1), (_tensor(shape, 15),), -1)]
    model(batch, True)
    assert described == [5]


def test_fusion_follows_tensor_identity_not_layout():
    """In a fused group, an op reads an earlier op's output from SBUF only when it is that
    tensor (same storage), not another tensor of the same shape: that one comes from HBM."""
    from neuron_sim.lower import lower_sequence
    from torch_neuronx.cost import fused_specs, identity_pattern

    def fused(second_input_storage):
        group = list(torch_neuronx._C.OpBatch([
            _desc(0, "aten::add.Tensor", ins=(1, 2), out=3),
            _desc(1, "aten::mul.Tensor", ins=(second_input_storage, 4), out=5)]))
        pattern = identity_pattern(group)
        return lower_sequence(fused_specs(group, pattern), "trn2", 2).hbm_bytes, pattern

    (chained, p1), (unrelated, p2) = fused(3), fused(7)
    assert p1 != p2 and p1[3] == p1[2]            # mul's first input is add's output
    assert unrelated - chained == pytest.approx(256 * 256 * 4, rel=0.01)   # one more HBM read


def test_a_reused_address_is_not_an_earlier_output():
    """op 0 writes storage 3 as [256, 256]; op 1 writes the same bytes as [128, 512] (the
    allocator reused a freed output's memory); op 2 reading [256, 256] there reads op 1's
    bytes through a view, not op 0's output: it comes from HBM, in every process alike."""
    from torch_neuronx.cost import identity_pattern
    group = [_desc(0, "aten::add.Tensor", ins=(1, 2), out=3),
             _desc(1, "aten::mul.Tensor", shape=(128, 512), ins=(4, 5), out=3),
             _desc(2, "aten::add.Tensor", ins=(3, 6), out=7)]
    pattern = identity_pattern(list(torch_neuronx._C.OpBatch(group)))
    assert pattern[6][0] == "x"          # op 2's first input: an outside tensor


def test_first_device_use_loads_the_kernels_in_background(py):
    """numba's one-off load of the dependency and scheduling kernels runs in a thread started
    at the first tensor put on the device, not inside the first drain; plain `import torch`
    starts no thread."""
    out = py("""
        import threading, torch, torch_neuronx
        from neuron_sim.kernels import deps
        assert not any(t.name == "neuron-sim-warm-up" for t in threading.enumerate())
        x = torch.ones(4).to("neuron")
        warm = torch_neuronx._state["cost_model"]._warm_up
        warm.join(120)
        from neuron_sim.kernels import schedule
        loaded = [bool(getattr(k, "signatures", [True])) for k in
                  (deps._auto_deps, schedule._list_schedule)]
        print("warm", warm.name, warm.is_alive(), loaded)
    """).stdout
    assert "warm neuron-sim-warm-up False [True, True]" in out
