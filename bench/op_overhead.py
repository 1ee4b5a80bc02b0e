"""Per-op overhead of the 'neuron' device on tiny tensors, against CPU PyTorch (issue 19).

A chain of OPS element-wise ops (`x = x + 1` on a 16-element float32 tensor) runs on CPU, on
'neuron' with Adaptive Eager Execution (AEE) on, and with it off; each neuron run ends with a
synchronize, so the drain and the cost model are inside the measured time. Rounds alternate
between the three so machine noise hits all alike; medians are reported. The values are
checked against CPU once (the device path must compute the same thing it is timed on).

RESULT ratio_aee=<neuron AEE on / cpu wall> ratio_noaee=<neuron AEE off / cpu wall>
       cpu_us=<per op> aee_us=<per op> noaee_us=<per op>   (issue 19 target: both ratios <= 3.0)
"""

import statistics
import time

import torch

import torch_neuronx
from neuron_sim.progress import progress

OPS = 10_000
ROUNDS = 5
NUMEL = 16


def chain(device):
    x = torch.zeros(NUMEL, device=device)
    t0 = time.perf_counter()
    for _ in range(OPS):
        x = x + 1
    if device != "cpu":
        torch.neuron.synchronize()
    return time.perf_counter() - t0, x


def main():
    modes = {"cpu": ("cpu", None), "aee": ("neuron", True), "noaee": ("neuron", False)}
    for device, aee in modes.values():               # warm-up: programs lowered and cached
        torch_neuronx.set_adaptive_eager(aee)
        _, x = chain(device)
        assert torch.equal(x.cpu(), torch.full((NUMEL,), float(OPS))), f"{device}: wrong values"
    wall = {k: [] for k in modes}
    for _ in progress(range(ROUNDS), "rounds of cpu, aee, noaee", " rounds"):
        for name, (device, aee) in modes.items():
            torch_neuronx.set_adaptive_eager(aee)
            wall[name].append(chain(device)[0])
    torch_neuronx.set_adaptive_eager(None)
    us = {k: 1e6 * statistics.median(v) / OPS for k, v in wall.items()}
    print(f"{OPS} ops of x = x + 1 on {NUMEL} float32 elements, median of {ROUNDS} rounds:")
    for name, v in us.items():
        print(f"  {name:<6} {v:7.2f} us/op  ({v / us['cpu']:.2f}x CPU)")
    print(f"RESULT ratio_aee={us['aee'] / us['cpu']:.2f} ratio_noaee={us['noaee'] / us['cpu']:.2f} "
          f"cpu_us={us['cpu']:.2f} aee_us={us['aee']:.2f} noaee_us={us['noaee']:.2f}")


if __name__ == "__main__":
    main()
