"""torch.save / torch.load, map_location, deepcopy."""

import copy
import io

import torch


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_state_dict_roundtrip_stays_on_device():
    m = torch.nn.Linear(4, 3).to("neuron:1")
    sd = _roundtrip(m.state_dict())
    assert sd["weight"].device == torch.device("neuron:1")
    assert torch.equal(sd["weight"].cpu(), m.weight.detach().cpu())


def test_map_location_cpu_and_to_neuron():
    t = torch.arange(6.0, device="neuron").view(2, 3)
    on_cpu = _roundtrip(t, map_location="cpu")
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, torch.arange(6.0).view(2, 3))
    cpu_ckpt = {"w": torch.randn(3)}
    loaded = _roundtrip(cpu_ckpt, map_location="neuron")
    assert loaded["w"].device.type == "neuron" and torch.equal(loaded["w"].cpu(), cpu_ckpt["w"])


def test_views_keep_sharing_after_load():
    base = torch.arange(8.0, device="neuron")
    a, b = _roundtrip((base, base[2:5]))
    b.fill_(-1)
    assert a[3].item() == -1


def test_deepcopy_module_and_tensor():
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()).to("neuron")
    m2 = copy.deepcopy(m)
    assert m2[0].weight.device.type == "neuron"
    m2[0].weight.data.zero_()
    assert m[0].weight.abs().sum().item() > 0
    t = torch.ones(2, device="neuron")
    assert torch.equal(copy.deepcopy(t).cpu(), torch.ones(2))
