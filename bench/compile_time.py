"""Compile cost and simulated payoff of torch.compile(backend="neuron") on a small GPT.

1. Compile wall time: the first forward + backward of the same model under backend="neuron" (on
   the simulated device) and backend="inductor" (on CPU, cold caches), each minus one
   steady-state step. Target: neuron / inductor <= 1.0.
2. Simulated training-step time (forward + backward + AdamW) eager vs compiled (model and
   optimizer step compiled), with the per-engine explanation.

Last line: RESULT compile_ratio=<neuron/inductor> sim_speedup=<eager/compiled>
Run: .venv/bin/python bench/compile_time.py  (about 2-3 minutes, mostly Inductor's C++ builds)
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

_TMP = tempfile.TemporaryDirectory(prefix="compile_time_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_TMP.name, "inductor")   # cold Inductor
os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(_TMP.name, "neff")   # cold neuron

import torch  # noqa: E402

import torch_neuronx  # noqa: E402
import torch_neuronx.neuron_dynamo_backend as ndb  # noqa: E402
from neuron_sim.progress import Progress  # noqa: E402
from torch_neuronx.neuron_dynamo_backend.graph_cost import Target  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "compile"))
from tiny_gpt import batch, make  # noqa: E402
from train_step import trainer  # noqa: E402


def first_step_compile_s(model, x, y) -> float:
    """Wall seconds the first forward+backward takes beyond a steady-state one."""
    def step():
        model(x, y).backward()
        if x.device.type == "neuron":
            torch.neuron.synchronize()
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    start = time.perf_counter()
    step()
    steady = time.perf_counter() - start
    return first - steady


def compile_times(kw) -> tuple:
    torch._dynamo.reset()
    x, y = batch("neuron", vocab=kw["vocab"])
    neuron_s = first_step_compile_s(torch.compile(make("neuron", **kw), backend="neuron"), x, y)
    torch._dynamo.reset()
    x, y = batch("cpu", vocab=kw["vocab"])
    inductor_s = first_step_compile_s(torch.compile(make("cpu", **kw), backend="inductor"), x, y)
    torch._dynamo.reset()
    return neuron_s, inductor_s


def step_profiles(kw):
    eager_step, eager_losses = trainer(make("neuron", **kw), False, vocab=kw["vocab"])
    compiled_step, compiled_losses = trainer(torch.compile(make("neuron", **kw), backend="neuron"),
                                             True, vocab=kw["vocab"])
    for _ in range(2):                       # warm-up: compile, fill program caches
        eager_step()
        compiled_step()
    graphs = ndb.get_dynamo_metrics()
    eager = ndb.measure_step(eager_step)
    compiled = ndb.measure_step(compiled_step)
    return eager, compiled, eager_losses, compiled_losses, graphs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--vocab", type=int, default=256)
    args = p.parse_args()
    kw = dict(layers=args.layers, d=args.d, vocab=args.vocab)
    print(f"model: TinyGPT {kw}, instance {torch_neuronx.get_instance()}")

    with Progress("compile_time", unit=" stages", total=2, delay_s=0) as bar:
        bar.stage("first steps, compiled (neuron, inductor)")
        neuron_s, inductor_s = compile_times(kw)
        bar.tick()
        graphs = ndb.get_dynamo_metrics()
        ndb.reset_dynamo_metrics()
        bar.stage("eager and compiled steps")
        eager, compiled, eager_losses, compiled_losses, step_graphs = step_profiles(kw)
        bar.tick()
    sim_compile_s = sum(g.sim_compile_ns for g in graphs) / 1e9
    print(f"compile wall time: neuron {neuron_s:.2f} s, inductor (CPU) {inductor_s:.2f} s "
          f"({len(graphs)} neuron graphs; simulated neuronx-cc time {sim_compile_s:.1f} s, "
          "reported apart from run time)")

    graphs = step_graphs
    print(f"loss eager {eager_losses[-1]:.5f} compiled {compiled_losses[-1]:.5f}")
    launch_ns = Target.of(torch_neuronx._visible()).launch_ns
    print(ndb.compare(eager, compiled, launch_ns=launch_ns))
    for g in graphs:
        print(f"  graph {g.graph_name:28s} {g.kind:9s} {g.ops:4d} ops {g.sim_run_ns / 1e3:9.1f} us "
              f"HBM {g.dma_bytes / 1e6:6.1f} MB ({g.cost_source})")
    ratio = neuron_s / inductor_s if inductor_s > 0 else float("inf")
    speedup = eager.device_ns / compiled.device_ns
    print(f"RESULT compile_ratio={ratio:.3f} sim_speedup={speedup:.2f}")


if __name__ == "__main__":
    main()
