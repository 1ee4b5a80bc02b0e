"""Ops never mix devices silently, and device indices are checked, as on CUDA."""

import pytest
import torch


def test_issue_repro_op_mixing_two_devices_raises():
    a = torch.ones(3, device="neuron:0")
    b = torch.ones(3, device="neuron:1")
    msg = "Expected all tensors to be on the same device, but found at least two devices, neuron:0 and neuron:1"
    with pytest.raises(RuntimeError, match=msg):
        a + b
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(2, 3, device="neuron:1") @ torch.ones(3, 2, device="neuron:0")


def test_copies_between_devices_still_work():
    a = torch.arange(4.0, device="neuron:0")
    b = torch.zeros(4, device="neuron:1")
    b.copy_(a)
    assert a.to("neuron:1").device == torch.device("neuron:1")
    assert b.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (a.to("neuron:1") + b).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_issue_repro_synchronize_invalid_device_raises():
    with pytest.raises(RuntimeError, match=r"invalid device ordinal: neuron:99 does not exist"):
        torch.neuron.synchronize(99)
    torch.neuron.synchronize(1)   # a valid index still works
    torch.neuron.synchronize()
