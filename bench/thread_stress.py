"""Threads on the device: 4 threads on 4 devices plus 2 more threads on one device, each doing
500 eager ops (matmul, tanh, scale-and-shift, with a copy to the host every 25 ops and events
recorded and read), checked against the same ops on CPU. Repeated for --runs runs.

Runs happen in a child interpreter, one after another; a run whose threads do not finish
within --deadline seconds counts as a hang, and the child is replaced by a fresh one for the
runs left (a deadlocked process cannot be recovered). Last line:
RESULT runs=<n> passed=<runs with every thread CPU-equal> hangs=<n> seconds=<wall>."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import os, sys, threading, torch
OPS, SYNC_EVERY = 500, 25
runs, deadline = int(sys.argv[1]), float(sys.argv[2])

def work(device, seed, errors):
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(32, 32, generator=g) / 6
    b0 = torch.randn(32, generator=g)
    ref = torch.randn(16, 32, generator=g)
    x, w, b = ref.to(device), w0.to(device), b0.to(device)
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    start.record()
    for i in range(OPS // 2):                  # two device ops per step
        if i % 2 == 0:
            x = (x @ w).tanh(); ref = (ref @ w0).tanh()
        else:
            x = x * 0.5 + b; ref = ref * 0.5 + b0
        if i % SYNC_EVERY == 0:
            x.cpu()
    end.record()
    if not start.elapsed_time(end) > 0:
        errors.append(f"{device}: no simulated time")
    got = x.cpu()
    if not torch.allclose(got, ref, rtol=1e-6, atol=1e-7):
        errors.append(f"{device}: max diff {(got - ref).abs().max().item()}")

for run in range(runs):
    errors = []
    plan = [(f"neuron:{d}", 100 * run + d) for d in range(4)]
    plan += [("neuron:0", 100 * run + 10 + k) for k in range(2)]
    threads = [threading.Thread(target=work, args=(dev, seed, errors), daemon=True)
               for dev, seed in plan]
    [t.start() for t in threads]
    [t.join(deadline) for t in threads]
    if any(t.is_alive() for t in threads):
        print("RUN hang", flush=True)
        os._exit(3)
    print("RUN ok" if not errors else "RUN mismatch " + "; ".join(errors), flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=60.0,
                        help="seconds a run may take before it counts as a hang")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "TORCH_NEURONX_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "backend"), env.get("PYTHONPATH", "")])
    t0 = time.perf_counter()
    passed = hangs = done = 0
    while done < args.runs:
        left = args.runs - done
        proc = subprocess.run([sys.executable, "-c", CHILD, str(left), str(args.deadline)],
                              cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=args.deadline * (left + 1) + 120)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RUN ")]
        for line in lines:
            done += 1
            passed += line == "RUN ok"
            hangs += line == "RUN hang"
            print(f"run {done:2d}: {line[4:]}", flush=True)
        if proc.returncode not in (0, 3):   # crashed or raised: that run failed
            done += 1
            print(f"run {done:2d}: child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}",
                  flush=True)
    seconds = time.perf_counter() - t0
    print(f"RESULT runs={args.runs} passed={passed} hangs={hangs} seconds={seconds:.0f}")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
