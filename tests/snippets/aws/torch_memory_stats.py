# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/guides/memory-profiling-guide.html
# (the TorchNeuron memory guide: torch.neuron.memory_allocated / max_memory_allocated /
# memory_reserved / memory_stats / memory_summary / reset_peak_memory_stats / empty_cache, and its
# rule that the allocator is asynchronous, so torch.neuron.synchronize() comes before reading a
# statistic). Not a copy of the page's text: the stored copy is cut before its examples, so this
# file makes those calls around a tensor of known size written for this test and checks the
# numbers against the bytes it allocated (not on the page).
import torch

torch.neuron.synchronize()
base = torch.neuron.memory_allocated()
torch.neuron.reset_peak_memory_stats()

x = torch.empty(1024, 1024, device="neuron")          # 4 MiB of float32
y = x.fill_(1.0) * 2                                   # 4 MiB more
torch.neuron.synchronize()
allocated = torch.neuron.memory_allocated() - base
peak = torch.neuron.max_memory_allocated() - base
stats = torch.neuron.memory_stats()
print(f"allocated {allocated} B, peak {peak} B, reserved {torch.neuron.memory_reserved()} B")
assert allocated == 2 * 4 * 1024 * 1024 and peak >= allocated, (allocated, peak)
assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated()
assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()

del x, y
torch.neuron.synchronize()
assert torch.neuron.memory_allocated() == base
torch.neuron.empty_cache()
summary = torch.neuron.memory_summary()
assert summary.startswith("neuron:0 memory summary") and "allocated_bytes" in summary, summary[:200]
print(f"after del: allocated {torch.neuron.memory_allocated() - base} B; peak kept {torch.neuron.max_memory_allocated() - base} B")
