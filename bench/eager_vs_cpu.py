"""Eager training step of the demo GPT on 'neuron' against the same step on CPU, in one run.

Both run the same CPU kernels; the ratio is the cost of the device path (zero-copy fallback,
descriptor queue, drain, cost model). Steps alternate between the devices so machine noise
hits both alike; medians are reported.

The neuron steps pay the full eager path: descriptor queue, drain, program-cache lookup,
timing (and Adaptive Eager fusion). The first (cold) steps also lower and simulate every new op
and fused group; that lowering time is reported separately. After the measured steps, a few
steps run with AEE off to show its effect on simulated time.

RESULT ratio=<wall neuron / wall cpu> sim_step_ms=<simulated step, AEE on>
       sim_step_noaee_ms=<simulated step, AEE off> cold_lower_ms=<lowering+simulation, cold cache>
       hit_rate=<program-cache hit rate over the measured steps> estimated_ops=<kinds estimated>
       cold_lower_cpu_ms=<CPU time of the same lowering (its thread), steady under machine load>

Cold means a fresh process: nothing lowered is kept on disk. numba's compiled kernels are (its
own cache); their one-off load runs in a background thread from the device's first use
(torch_neuronx.cost): never in the CPU figure, in the wall figure as far as the first drain
waits for it.
"""

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "gpt"))
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


def simulated_step_ms(state):
    begin, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    begin.record()
    timed_step(state)
    end.record()
    return begin.elapsed_time(end)


def main():
    import torch_neuronx
    from neuron_sim.progress import progress
    torch.set_num_threads(1)  # the two devices must not compete for cores differently
    cpu, neuron = setup("cpu"), setup("neuron")
    cache = torch_neuronx.timing_breakdown()["cache"]
    for _ in progress(range(WARMUP), "warm-up steps (cold programs)", " steps"):
        timed_step(cpu)
        timed_step(neuron)
    cold = torch_neuronx.timing_breakdown()["cache"]
    cold_lower_s = cold["lower_s"] - cache["lower_s"]
    cold_lower_cpu_s = cold["lower_cpu_s"] - cache["lower_cpu_s"]
    cache0 = torch_neuronx.timing_breakdown()["cache"]
    cpu_s, neuron_s, sim_ms = [], [], []
    begin, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    for _ in progress(range(STEPS), "timed steps", " steps"):
        cpu_s.append(timed_step(cpu))
        begin.record()
        neuron_s.append(timed_step(neuron))
        end.record()
        sim_ms.append(begin.elapsed_time(end))
    cpu_ms = 1e3 * statistics.median(cpu_s)
    neuron_ms = 1e3 * statistics.median(neuron_s)
    sim = statistics.median(sim_ms)
    cache1 = torch_neuronx.timing_breakdown()["cache"]
    lookups = (cache1["hits"] + cache1["misses"]) - (cache0["hits"] + cache0["misses"])
    hit_rate = (cache1["hits"] - cache0["hits"]) / lookups if lookups else 0.0
    torch_neuronx.reset_timing_stats()
    simulated_step_ms(neuron)
    print(torch_neuronx.timing_report(top=12))
    torch_neuronx.set_adaptive_eager(False)
    simulated_step_ms(neuron)                       # per-op programs are cached already
    sim_noaee = simulated_step_ms(neuron)
    torch_neuronx.set_adaptive_eager(None)
    estimated = torch_neuronx.estimated_ops()
    print(f"wall per step: cpu {cpu_ms:.1f} ms, neuron {neuron_ms:.1f} ms (median of {STEPS})")
    print(f"simulated step on {torch.neuron.get_device_properties(0).instance}: {sim:.3f} ms with "
          f"Adaptive Eager Execution, {sim_noaee:.3f} ms without")
    print(f"cold cache: {1e3 * cold_lower_s:.0f} ms ({1e3 * cold_lower_cpu_s:.0f} ms CPU) lowering + "
          f"simulating programs in the first "
          f"{WARMUP} steps; measured steps: {100 * hit_rate:.1f}% cache hits of {lookups} lookups")
    print(f"estimated ops (no lowering rule): {estimated or 'none'}")
    print(f"RESULT ratio={neuron_ms / cpu_ms:.3f} sim_step_ms={sim:.3f} "
          f"sim_step_noaee_ms={sim_noaee:.3f} cold_lower_ms={1e3 * cold_lower_s:.0f} "
          f"hit_rate={hit_rate:.4f} estimated_ops={len(estimated)} "
          f"cold_lower_cpu_ms={1e3 * cold_lower_cpu_s:.0f}")


if __name__ == "__main__":
    main()
