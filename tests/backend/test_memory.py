"""Allocator statistics and simulated HBM capacity."""

import gc

import pytest
import torch

MiB = 2**20


def test_stats_follow_allocations():
    gc.collect()          # garbage of earlier tests must not be freed in the middle of the count
    torch.neuron.synchronize()
    torch.neuron.reset_peak_memory_stats()
    before = torch.neuron.memory_allocated()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="neuron")
    assert torch.neuron.memory_allocated() == before + 4 * MiB
    assert torch.accelerator.memory_allocated() == before + 4 * MiB
    del x
    gc.collect()
    assert torch.neuron.memory_allocated() == before
    assert torch.neuron.max_memory_allocated() >= before + 4 * MiB
    stats = torch.neuron.memory_stats()
    assert set(stats["allocated_bytes"]) == {"current", "peak", "allocated", "freed"}
    assert stats["allocated_bytes"]["freed"] >= 4 * MiB
    assert "num_ooms" in stats and "num_alloc_retries" in stats
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()


def test_results_of_ops_are_counted():
    before = torch.neuron.memory_allocated()
    a = torch.ones(256, 256, device="neuron")
    b = a @ a  # produced by a CPU kernel and adopted without a copy
    assert torch.neuron.memory_allocated() == before + 2 * 256 * 256 * 4
    assert torch.equal(b.cpu(), torch.full((256, 256), 256.0))


def test_stats_per_device_and_torch_neuronx_aliases():
    import torch_neuronx
    base1 = torch_neuronx.memory_allocated(1)
    y = torch.empty(MiB, dtype=torch.uint8, device="neuron:1")
    assert torch_neuronx.memory_allocated(1) == base1 + MiB
    assert torch.neuron.memory_allocated("neuron:1") == base1 + MiB
    assert "neuron:1" in torch.neuron.memory_summary(1)
    free, total = torch.neuron.mem_get_info(1)
    assert total == 24 * 2**30 and free == total - torch.neuron.memory_allocated(1)
    del y


def test_out_of_memory_is_recoverable():
    before = torch.neuron.memory_allocated()
    ooms = torch.neuron.memory_stats()["num_ooms"]
    keep = torch.empty(16 * 2**30, dtype=torch.uint8, device="neuron")
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(10 * 2**30, dtype=torch.uint8, device="neuron")
    message = str(info.value)
    assert "(OOM)" in message and "neuron:0" in message
    assert f"tried to allocate {10 * 2**30} bytes" in message
    assert f"{24 * 2**30 - before - 16 * 2**30} bytes free" in message
    assert torch.neuron.memory_stats()["num_ooms"] == ooms + 1
    assert torch.neuron.memory_allocated() == before + 16 * 2**30  # nothing leaked
    del keep
    gc.collect()
    assert torch.neuron.memory_allocated() == before
    assert (torch.ones(3, device="neuron") * 2).sum().item() == 6.0  # device still usable


def test_oom_inside_an_op_result():
    x = torch.empty(13 * 2**30, dtype=torch.uint8, device="neuron:2")
    with pytest.raises(torch.OutOfMemoryError, match="neuron:2"):
        x.clone()  # a CPU kernel's result is adopted: the capacity check applies too
    del x


def test_storage_creation_and_resize():
    s = torch.UntypedStorage(64, device="neuron")
    assert s.device.type == "neuron" and s.nbytes() == 64
    s.resize_(128)
    assert s.nbytes() == 128
    t = torch.zeros(4, device="neuron")
    t.resize_(16)
    assert t.shape == (16,) and torch.equal(t[:4].cpu(), torch.zeros(4))
