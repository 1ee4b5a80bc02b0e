"""Copies and out= arguments between overlapping views of one device tensor fail as on CPU.

The device computes with CPU kernels on aliases of device memory; aliases of one device
storage share one CPU storage, so CPU's own overlap checks run (before, the copy below
silently produced zeros).
"""

import pytest
import torch


def _error(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.type, str(info.value)


def test_issue_repro_overlapping_copy_raises_like_cpu():
    def shift(device):
        z = torch.arange(6.0, device=device)
        z[1:].copy_(z[:-1])

    cpu_type, cpu_text = _error(lambda: shift("cpu"))
    neuron_type, neuron_text = _error(lambda: shift("neuron"))
    assert (neuron_type, neuron_text) == (cpu_type, cpu_text)
    assert "single memory location" in neuron_text


def test_overlapping_out_argument_raises_like_cpu():
    def add_into_overlap(device):
        z = torch.arange(6.0, device=device)
        torch.add(z[:-1], 1, out=z[1:])

    assert _error(lambda: add_into_overlap("neuron")) == _error(lambda: add_into_overlap("cpu"))


def test_non_overlapping_and_identical_copies_still_work():
    z = torch.arange(6.0, device="neuron")
    z[3:].copy_(z[:3])      # disjoint halves of one storage
    z.copy_(z)              # the same memory: a no-op, as on CPU
    z[:2].add_(z[:2])       # in place on itself
    assert z.cpu().tolist() == [0.0, 2.0, 2.0, 0.0, 1.0, 2.0]
