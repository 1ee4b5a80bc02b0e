"""A result too large for the device's simulated HBM raises the device's OutOfMemoryError
before any host memory is taken (a 160 GB matmul result used to reach the host allocator).
Run in a fresh interpreter: if the check were missing, the host allocation could crash it."""

from subprocess_run import exited_cleanly, run_script


def test_issue_repro_160_gb_matmul_raises_device_oom():
    proc = run_script("""
import torch
a = torch.randn(200000, 1, device="neuron")
ooms = torch.neuron.memory_stats()["num_ooms"]
try:
    a @ a.T                                    # 200000 x 200000 float32 = 160 GB
except torch.OutOfMemoryError as e:
    assert "(OOM)" in str(e) and "neuron:0" in str(e) and "160000000000" in str(e), e
    print("OOM raised")
print(torch.neuron.memory_stats()["num_ooms"] - ooms)   # counted like the allocator's own OOMs
# The device stays usable.
print((torch.ones(2, 2, device="neuron") @ torch.ones(2, 2, device="neuron")).sum().item())
""", timeout=120)
    assert exited_cleanly(proc) == "", exited_cleanly(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["OOM", "raised", "1", "8.0"]
