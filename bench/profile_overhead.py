"""Cost of profiling the demo GPT training step on 'neuron' (issue 7).

Warm steps run first (the program cache is hot, as in any steady-state profile), then STEPS steps
unprofiled and STEPS steps under torch.profiler with CPU + PrivateUse1 activities and engine lanes,
exported through torch_neuronx.profiling.NeuronProfiler (trace.json with the Explorer summary).
The first profiled step also rebuilds each op's program once for its lanes; that cost is inside
the measured time.

RESULT overhead_ratio=<profiled wall / unprofiled wall, incl. export> trace_mb=<trace.json MB>
       steps=<N> lanes=<lane rows> device_rows=<op rows>
"""

import argparse
import json
import os
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "gpt"))
from gpt_model import GPT, GPTConfig, make_batch, train_step  # noqa: E402


def main(steps: int, warmup: int = 3):
    from neuron_sim.explorer import device_events
    from neuron_sim.progress import progress
    from torch_neuronx.profiling import NeuronConfig, NeuronProfiler
    torch.manual_seed(0)
    cfg = GPTConfig()
    model = GPT(cfg).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = (t.to("neuron") for t in make_batch(cfg, 8))
    for _ in range(warmup):
        train_step(model, opt, x, y).item()

    t0 = time.perf_counter()
    for _ in progress(range(steps), "unprofiled steps", " steps"):
        train_step(model, opt, x, y).item()
    plain = time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as out:
        cfg_p = NeuronConfig(profile_output_dir=out)
        exporter = NeuronProfiler(cfg_p)
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                     experimental_config=cfg_p, on_trace_ready=exporter.export_trace):
            for _ in progress(range(steps), "profiled steps", " steps"):
                train_step(model, opt, x, y).item()
            in_region = time.perf_counter() - t0
        profiled = time.perf_counter() - t0
        path = os.path.join(exporter.last_output_dir, "trace.json")
        mb = os.path.getsize(path) / 1e6
        trace = json.load(open(path))
    ops, lanes = device_events(trace)
    print(trace["neuronExplorer"]["summary"]["verdict"])
    print(f"unprofiled {plain:.2f} s, profiled {profiled:.2f} s for {steps} steps "
          f"({in_region:.2f} s of steps, {profiled - in_region:.2f} s collecting and exporting)")
    print(f"RESULT overhead_ratio={profiled / plain:.2f} trace_mb={mb:.1f} steps={steps} "
          f"lanes={len(lanes)} device_rows={len(ops)}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    main(ap.parse_args().steps)
