"""Random numbers on 'neuron': per-device generators, reproducible under manual_seed."""

import torch


def test_manual_seed_reproducible():
    torch.manual_seed(123)
    a = torch.randn(8, device="neuron")
    b = torch.rand(8, device="neuron")
    torch.manual_seed(123)
    assert torch.equal(a.cpu(), torch.randn(8, device="neuron").cpu())
    assert torch.equal(b.cpu(), torch.rand(8, device="neuron").cpu())


def test_neuron_stream_is_independent_of_cpu():
    torch.manual_seed(5)
    torch.randn(100)  # consuming the CPU generator ...
    x = torch.randn(4, device="neuron")
    torch.manual_seed(5)
    assert torch.equal(x.cpu(), torch.randn(4, device="neuron").cpu())  # ... leaves neuron's alone


def test_explicit_generator_and_state():
    g = torch.Generator(device="neuron")
    assert g.device.type == "neuron"
    g.manual_seed(7)
    x = torch.randn(5, device="neuron", generator=g)
    g.manual_seed(7)
    assert torch.equal(x.cpu(), torch.randn(5, device="neuron", generator=g).cpu())
    state = torch.neuron.get_rng_state()
    y = torch.rand(3, device="neuron")
    torch.neuron.set_rng_state(state)
    assert torch.equal(y.cpu(), torch.rand(3, device="neuron").cpu())
    assert torch.neuron.initial_seed() == torch.neuron.default_generators[0].initial_seed()


def test_dropout_reproducible():
    torch.manual_seed(0)
    d = torch.nn.functional.dropout(torch.ones(1000, device="neuron"), 0.5)
    torch.manual_seed(0)
    assert torch.equal(d.cpu(), torch.nn.functional.dropout(torch.ones(1000, device="neuron"), 0.5).cpu())
    assert 300 < int((d.cpu() == 0).sum()) < 700
