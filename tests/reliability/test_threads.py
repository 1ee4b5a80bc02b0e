"""Threads sharing the device never deadlock and compute what CPU computes.

Every scenario runs in a fresh interpreter with a timeout: a hang (two threads each waiting
for a lock the other holds) fails the test instead of freezing the suite, and the process
must exit by itself, never by a signal. Results of each thread are compared with the same
computation on CPU.
"""

import subprocess

import pytest

from subprocess_run import exited_cleanly, run_script

TIMEOUT_S = 150

# Each worker runs the issue's loop (matmul, tanh, copy to host) on its device and checks
# the result against CPU; the main thread joins with a deadline so a hang exits with 3.
HARNESS = """
import sys, threading, torch
failures = []

def check(name, got, want):
    if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
        failures.append(f"{name}: max diff {(got - want).abs().max().item()}")

def run(workers, deadline_s=100):
    ts = [threading.Thread(target=fn, args=args, daemon=True) for fn, args in workers]
    [t.start() for t in ts]
    [t.join(deadline_s) for t in ts]
    if any(t.is_alive() for t in ts):
        print("HANG", flush=True)
        import os; os._exit(3)
    assert not failures, failures
"""


def _run(body: str, env: dict | None = None):
    try:
        proc = run_script(HARNESS + body, env=env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"threads hung: no exit within {TIMEOUT_S} s")
    assert exited_cleanly(proc) == "", exited_cleanly(proc)
    assert proc.returncode != 3, f"threads hung:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    assert "OK" in proc.stdout
    return proc


def test_issue_repro_two_threads_two_devices():
    _run("""
def work(d):
    g = torch.Generator().manual_seed(d)
    x0 = torch.randn(64, 64, generator=g) / 8
    x, ref = x0.to(f"neuron:{d}"), x0
    for _ in range(200):
        x = (x @ x).tanh(); ref = (ref @ ref).tanh()
        host = x.cpu()
    check(f"neuron:{d}", host, ref)

run([(work, (d,)) for d in (0, 1)])
print("OK")
""")


def test_four_threads_on_one_device_with_events():
    # Events, synchronize and item() (all sync points) from every thread at once.
    _run("""
def work(i):
    g = torch.Generator().manual_seed(i)
    a0 = torch.randn(32, 48, generator=g)
    w0 = torch.randn(48, 16, generator=g)
    a, w = a0.to("neuron"), w0.to("neuron")
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    for step in range(60):
        start.record()
        y = torch.relu(a @ w) * 0.5 + step
        end.record()
        if step % 3 == 0: torch.neuron.synchronize()
        if step % 5 == 0: assert start.elapsed_time(end) > 0
        s = y.sum().item()
    ref = (torch.relu(a0 @ w0) * 0.5 + 59)
    check(f"thread {i}", y.cpu(), ref)

run([(work, (i,)) for i in range(4)])
print("OK")
""")


def test_threads_on_several_devices_with_torch_compile():
    # Compiled and eager work interleaved on four devices; each thread compiles for its own
    # device (guards see the device), so compilation itself also runs in threads.
    _run("""
def f(x, w):
    return torch.nn.functional.gelu(x @ w).sum(dim=1)

compiled = torch.compile(f, backend="neuron")

def work(d):
    g = torch.Generator().manual_seed(10 + d)
    x0, w0 = torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g)
    x, w = x0.to(f"neuron:{d}"), w0.to(f"neuron:{d}")
    for _ in range(5):
        got = compiled(x, w)
        eager = (x @ w).tanh().cpu()
    check(f"compiled neuron:{d}", got.cpu(), f(x0, w0))
    check(f"eager neuron:{d}", eager, (x0 @ w0).tanh())

run([(work, (d,)) for d in range(4)], deadline_s=120)
print("OK")
""")


def test_threads_with_a_full_queue():
    # The queue (one for the process) is timed early once it holds 4096 ops, from whichever
    # thread fills it: 3 x 2000 ops with a single sync midway (one thread) before the end
    # make such drains interleave with the syncs of the other threads.
    _run("""
def work(d, sync_midway):
    x0 = torch.arange(64, dtype=torch.float32)
    x, ref = x0.to(f"neuron:{d}"), x0.clone()
    for i in range(2000):
        x = x + 1; ref = ref + 1
        if sync_midway and i == 1000: x.cpu()
    check(f"neuron:{d}", x.cpu(), ref)

run([(work, (0, True)), (work, (0, False)), (work, (1, False))])
print("OK")
""")


def test_training_threads_with_launch_blocking():
    # Backward runs on the autograd engine's device threads, and with NEURON_LAUNCH_BLOCKING
    # every op is a sync point: the most drains, from the most threads.
    _run("""
def work(i):
    device = f"neuron:{i % 2}"
    torch.manual_seed(i)
    cpu_lin = torch.nn.Linear(16, 16)
    lin = torch.nn.Linear(16, 16).to(device)
    lin.load_state_dict(cpu_lin.state_dict())
    x0 = torch.randn(4, 16)
    x = x0.to(device)
    for model, inp in ((lin, x), (cpu_lin, x0)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(15):
            loss = model(inp).tanh().sum(); loss.backward(); opt.step(); opt.zero_grad()
    check(f"weights on {device}", lin.weight.detach().cpu(), cpu_lin.weight.detach())

run([(work, (i,)) for i in range(3)])
print("OK")
""", env={"NEURON_LAUNCH_BLOCKING": "1"})
