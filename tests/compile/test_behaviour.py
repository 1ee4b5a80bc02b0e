"""TorchNeuron's torch.compile rules (API reference section 4, must-match items 10-12)."""

import logging

import pytest
import torch

import torch_neuronx.neuron_dynamo_backend as ndb


def f(x):
    return (x.sin() * 2).sum(-1)


def test_dynamic_true_is_rejected_with_torchneuron_message():
    x = torch.randn(4, 8, device="neuron")
    with pytest.raises(Exception, match="Unbounded dynamism is disabled") as info:
        torch.compile(f, backend="neuron", dynamic=True)(x)
    assert "dynamic=False" in str(info.value)


def test_mark_dynamic_is_rejected():
    x = torch.randn(4, 8, device="neuron")
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(Exception, match="SymInt within FX Graphs"):
        torch.compile(f, backend="neuron")(x)


def test_new_shape_recompiles_statically():
    cf = torch.compile(f, backend="neuron")
    for n in (4, 5, 6, 5):
        x = torch.randn(n, 8, device="neuron")
        torch.testing.assert_close(cf(x).cpu(), f(x).cpu())
    assert len(ndb.get_dynamo_metrics()) == 3     # one static graph per shape, 5 reused


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_mode_other_than_default_warns_and_runs_default(mode, caplog):
    x = torch.randn(4, 8, device="neuron")
    with caplog.at_level(logging.WARNING, logger="torch_neuronx.neuron_dynamo_backend"):
        y = torch.compile(f, backend="neuron", mode=mode)(x)
    assert f"does not support mode='{mode}', falling back to default mode" in caplog.text
    torch.testing.assert_close(y.cpu(), f(x).cpu())


def test_fullgraph_raises_on_graph_break():
    def broken(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(broken, backend="neuron", fullgraph=True)(torch.randn(3, device="neuron"))


def uses_inverse(a):
    return torch.linalg.inv(a) + 1


def well_conditioned():
    return torch.randn(4, 4, device="neuron") + 4 * torch.eye(4, device="neuron")


def test_compile_failure_raises_by_default():
    with pytest.raises(Exception, match="no Neuron lowering") as info:
        torch.compile(uses_inverse, backend="neuron")(well_conditioned())
    assert "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0" in str(info.value)


def test_fallback_env_runs_graph_eagerly(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    a = well_conditioned()
    y = torch.compile(uses_inverse, backend="neuron")(a)
    torch.testing.assert_close(y.cpu(), uses_inverse(a).cpu())
    (m,) = ndb.get_dynamo_metrics()
    assert m.fell_back


def test_fallback_option_overrides_env(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
    a = well_conditioned()
    y = torch.compile(uses_inverse, backend="neuron", options={"fallback_execution": True})(a)
    torch.testing.assert_close(y.cpu(), uses_inverse(a).cpu())
    torch._dynamo.reset()
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    with pytest.raises(Exception, match="no Neuron lowering"):
        torch.compile(uses_inverse, backend="neuron", options={"fallback_execution": False})(a)


def make_ones(x):
    return x.sin().sum(-1) + torch.ones(x.shape[0], device=x.device)


def test_cpu_inputs_are_copied_and_outputs_stay_on_neuron():
    x = torch.randn(4, 8)
    y = torch.compile(make_ones, backend="neuron")(x)
    assert y.device.type == "neuron"
    torch.testing.assert_close(y.cpu(), make_ones(x))


def test_retain_device_mode_returns_outputs_to_cpu(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_RETAIN_DEVICE_MODE", "1")
    x = torch.randn(4, 8)
    y = torch.compile(make_ones, backend="neuron")(x)
    assert y.device.type == "cpu"
    torch.testing.assert_close(y, make_ones(x))


def test_disable_cpu_autocopy_raises(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "1")
    with pytest.raises(Exception, match="on cpu, expected neuron"):
        torch.compile(make_ones, backend="neuron")(torch.randn(4, 8))


def test_unknown_options_warn(caplog):
    with caplog.at_level(logging.WARNING, logger="torch_neuronx.neuron_dynamo_backend"):
        torch.compile(f, backend="neuron", options={"triton.cudagraphs": True})(
            torch.randn(2, 2, device="neuron"))
    assert "ignores torch.compile options ['triton.cudagraphs']" in caplog.text


def test_cpu_input_mutated_in_place_is_written_back():
    def bump(x):
        x.add_(1)
        return x * 2
    x = torch.zeros(3, 4)
    y = torch.compile(bump, backend="neuron")(x)
    torch.testing.assert_close(x, torch.ones(3, 4))
    torch.testing.assert_close(y.cpu(), 2 * torch.ones(3, 4))
