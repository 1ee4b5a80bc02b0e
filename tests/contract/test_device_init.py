"""The runtime reports itself initialised once a device is chosen (as CUDA's does), so
FakeTensorMode, torch.compile and FSDP2 place plain 'neuron' tensors on the current device."""

import json
from pathlib import Path

WORKERS = Path(__file__).resolve().parent / "workers"


def test_set_device_initialises_and_fake_tensors_follow_it(py):
    out = py("""
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        before = torch.neuron.is_initialized()
        torch.neuron.set_device(1)
        with FakeTensorMode():
            fake = torch.empty(2, device="neuron")
        print(before, torch.neuron.is_initialized(), fake.device)
    """).stdout.split()
    assert out == ["False", "True", "neuron:1"]


def test_set_device_before_init_process_group_and_meta_init():
    from dist_launch import describe, launch
    results, _ = launch(WORKERS / "fsdp_meta_init.py", nprocs=2, timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    rows = [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]
    for rank, row in enumerate(rows):
        assert row["initialized"] is True
        assert row["param_devices"] == [f"neuron:{rank}"]
    assert rows[0]["loss"] == rows[1]["loss"]
