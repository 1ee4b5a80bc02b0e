"""Eager training step of the demo GPT on 'neuron' against the same step on CPU, in one run.

Both run the same CPU kernels; the ratio is the cost of the device path (zero-copy fallback,
descriptor queue, drain, cost model). Steps alternate between the devices so machine noise
hits both alike; medians are reported.

RESULT ratio=<wall neuron / wall cpu> sim_step_ms=<simulated step>
"""

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from gpt_model import GPT, GPTConfig, make_batch, train_step  # noqa: E402

STEPS = 12
WARMUP = 2


def setup(device):
    torch.manual_seed(0)
    cfg = GPTConfig()
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = (t.to(device) for t in make_batch(cfg, 8))
    return model, opt, x, y


def timed_step(state):
    model, opt, x, y = state
    start = time.perf_counter()
    loss = train_step(model, opt, x, y)
    loss.item()
    return time.perf_counter() - start


def main():
    torch.set_num_threads(1)  # the two devices must not compete for cores differently
    cpu, neuron = setup("cpu"), setup("neuron")
    for _ in range(WARMUP):
        timed_step(cpu)
        timed_step(neuron)
    cpu_s, neuron_s, sim_ms = [], [], []
    begin, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    for _ in range(STEPS):
        cpu_s.append(timed_step(cpu))
        begin.record()
        neuron_s.append(timed_step(neuron))
        end.record()
        sim_ms.append(begin.elapsed_time(end))
    cpu_ms = 1e3 * statistics.median(cpu_s)
    neuron_ms = 1e3 * statistics.median(neuron_s)
    sim = statistics.median(sim_ms)
    print(f"wall per step: cpu {cpu_ms:.1f} ms, neuron {neuron_ms:.1f} ms (median of {STEPS})")
    print(f"simulated step on {torch.neuron.get_device_properties(0).name}: {sim:.3f} ms")
    print(f"RESULT ratio={neuron_ms / cpu_ms:.3f} sim_step_ms={sim:.3f}")


if __name__ == "__main__":
    main()
