"""Device registration, loading and the simulated instance configuration."""

import pytest
import torch


def test_device_string_and_generated_methods():
    x = torch.ones(2, device="neuron")
    assert x.device == torch.device("neuron:0") and x.device.type == "neuron"
    assert x.is_neuron and torch.ones(1).neuron().device.type == "neuron"
    m = torch.nn.Linear(2, 2).neuron()
    assert m.weight.device.type == "neuron"
    assert "device='neuron:0'" in repr(x)


def test_accelerator_reports_neuron():
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == 4  # trn2.3xlarge at LNC=2
    assert torch.neuron.is_available() and torch.neuron.is_bf16_supported()
    torch.accelerator.synchronize()
    props = torch.neuron.get_device_properties(0)
    assert props.instance == "trn2.3xlarge" and props.total_memory == 24 * 2**30
    assert props.name == "Trainium2" and (props.major, props.minor) == (3, 0)
    assert torch.neuron.get_device_name(1) == "neuron:1"


def test_set_device_and_context():
    with torch.neuron.device(2):
        assert torch.neuron.current_device() == 2
        assert torch.zeros(1, device="neuron").device.index == 2
    assert torch.neuron.current_device() == 0
    a = torch.arange(4.0, device="neuron:1")
    assert torch.equal(a.to("neuron:3").cpu(), torch.arange(4.0))


def test_device_index_out_of_range():
    with pytest.raises(RuntimeError, match=r"invalid device ordinal: neuron:9 does not exist; "
                                           r"this process sees 4 neuron device\(s\)"):
        torch.zeros(1, device="neuron:9")
    with pytest.raises(ValueError, match="Invalid device id: 7"):
        torch.neuron.set_device(7)
    assert torch.zeros(1, device="neuron").device.index == 0  # still usable


@pytest.mark.parametrize("env,count,name", [
    ({"NEURON_SIM_INSTANCE": "trn2.48xlarge"}, 64, "trn2.48xlarge"),
    ({"NEURON_SIM_INSTANCE": "trn2.3xlarge", "NEURON_LOGICAL_NC_CONFIG": "1"}, 8, "trn2.3xlarge"),
    ({"NEURON_RT_VISIBLE_CORES": "1-2"}, 2, "trn2.3xlarge"),
    ({"NEURON_RT_NUM_CORES": "3"}, 3, "trn2.3xlarge"),
    ({"NEURON_SIM_INSTANCE": "trn1.32xlarge"}, 32, "trn1.32xlarge"),
])
def test_instance_from_environment(py, env, count, name):
    out = py("""
        import torch
        print(torch.neuron.device_count(), torch.neuron.get_device_properties(0).instance)
    """, env).stdout.split()
    assert out == [str(count), name]


def test_trn3_instance_memory(py):
    out = py("""
        import torch
        p = torch.neuron.get_device_properties(0)
        print(p.chip, p.total_memory)
    """, {"NEURON_SIM_INSTANCE": "trn3.48xlarge"}).stdout.split()
    assert out[0] == "trn3"
    assert int(out[1]) == 144 * 10**9 // 8 * 2 or int(out[1]) > 24 * 2**30


def test_set_instance_from_python(py):
    out = py("""
        import torch, torch_neuronx
        torch_neuronx.set_instance("trn2.48xlarge")
        print(torch.neuron.device_count(), torch_neuronx.get_instance())
        torch.ones(1, device="neuron")
        try:
            torch_neuronx.set_instance("trn2.3xlarge")
        except RuntimeError as e:
            print("refused:", "already initialized" in str(e))
    """).stdout.split("\n")
    assert out[0] == "64 trn2.48xlarge" and out[1] == "refused: True"


@pytest.mark.parametrize("env,message", [
    ({"NEURON_SIM_INSTANCE": "trn9.huge"}, "Unknown simulated instance 'trn9.huge'. Valid instances: trn1.2xlarge"),
    ({"NEURON_LOGICAL_NC_CONFIG": "4"}, "NEURON_LOGICAL_NC_CONFIG=4 is not valid for trn2.3xlarge; valid values: 1, 2"),
    ({"NEURON_RT_VISIBLE_CORES": "2-9"}, "core 9 does not exist; the instance has logical cores 0-3"),
    ({"NEURON_RT_NUM_CORES": "many"}, "NEURON_RT_NUM_CORES='many' is not an integer"),
    ({"NEURON_SIM_INSTANCE": "trn2.48xlarge", "NEURON_LOGICAL_NC_CONFIG": "1"},
     "128 NeuronCores are visible but a PyTorch process can index at most 127 devices"),
])
def test_invalid_configuration_is_a_clear_error(py, env, message):
    # `import torch` still works (autoload must not break it); using the device raises.
    out = py("""
        import torch
        print(torch.neuron.device_count())
        try:
            torch.ones(1, device="neuron")
        except RuntimeError as e:
            print(e)
    """, env).stdout
    assert out.startswith("0\n") and message in out, out


def test_autoload_and_its_off_switch(py):
    assert py("import torch; print(torch.ones(1, device='neuron').device)").stdout.strip() == "neuron:0"
    proc = py("""
        import torch
        try:
            torch.ones(1, device="neuron")
        except RuntimeError as e:
            print("not registered")
        import torch_neuronx
        print(torch.ones(1, device="neuron").device)
    """, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.stdout.split("\n")[:2] == ["not registered", "neuron:0"]


def test_import_torch_neuronx_first(py):
    out = py("import torch_neuronx, torch; print(torch.ones(1, device='neuron').device)").stdout
    assert out.strip() == "neuron:0"


def test_version_identity():
    import importlib.metadata

    import torch_neuronx
    torch_minor = ".".join(torch.__version__.split(".")[:2])
    assert torch_neuronx.__version__.startswith(torch_minor + ".3.")
    assert importlib.metadata.version("torch-neuronx").startswith(torch_minor + ".3.")
