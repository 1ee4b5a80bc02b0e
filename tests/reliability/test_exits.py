"""Error paths end the process with an exit code and a clear message, never a signal: a bad
setting met around backward(), and a collective timeout on the `neuron` process group (gloo's
worker thread used to free the failed check's tensors during interpreter exit: SIGABRT)."""

import os
import socket
import subprocess
import sys
import textwrap

from subprocess_run import ROOT, exited_cleanly, run_script

BACKWARD = """
    import os, torch
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to("neuron")
    x = torch.randn(4, 8, device="neuron")
    {flip}
    loss = m(x).sum()
    loss.backward()
    print(float(m[0].weight.grad.sum()))
"""


def test_bad_setting_at_start_fails_cleanly_at_first_use():
    proc = run_script(BACKWARD.format(flip=""), env={"TORCH_NEURONX_ENABLE_CONCATENATION": "maybe"})
    assert proc.returncode == 1, exited_cleanly(proc) or proc.stdout
    assert "TORCH_NEURONX_ENABLE_CONCATENATION='maybe' is not a boolean; valid values: 0/1" in proc.stderr


def test_bad_setting_met_during_backward_fails_cleanly():
    flip = 'os.environ["TORCH_NEURONX_ENABLE_CONCATENATION"] = "maybe"'
    proc = run_script(BACKWARD.format(flip=flip))
    assert proc.returncode == 1, exited_cleanly(proc) or proc.stdout
    assert "TORCH_NEURONX_ENABLE_CONCATENATION='maybe' is not a boolean" in proc.stderr


def test_a_script_ending_right_after_backward_exits_cleanly():
    """The autograd thread of the device used to free its last graph task (and the Python
    context torch stashes with it) while the interpreter was finalizing: SIGABRT in about 2 runs
    of 5. torch_neuronx now lets that thread finish at exit."""
    code = """
        import torch
        m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to("neuron")
        x = torch.randn(32, 64, device="neuron")
        for _ in range(3):
            m(x).sum().backward()
    """
    for _ in range(4):
        proc = run_script(code)
        assert proc.returncode == 0, exited_cleanly(proc) or proc.stderr[-3000:]


def test_the_status_publisher_has_ended_when_the_interpreter_finalizes():
    """neuron-top's publisher thread reads the device clock with the GIL released; ended by a
    finalizing interpreter inside that read, it ran std::terminate ("terminate called without
    an active exception", SIGABRT) after the script's work had succeeded, in runs under heavy
    load. The race itself needs that load; what prevents it is checked here: the publisher is
    gone before finalization (an atexit hook registered first runs last)."""
    code = """
        import atexit, threading
        atexit.register(lambda: print("publisher alive:", any(
            t.name == "neuron-sim-status" and t.is_alive() for t in threading.enumerate())))
        import torch
        print(float((torch.ones(3, device="neuron") + 1).sum()))
    """
    proc = run_script(code)
    assert proc.returncode == 0, exited_cleanly(proc) or proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:2] == ["6.0", "publisher alive: False"], proc.stdout


def test_a_thread_inside_a_clock_read_at_exit_does_not_abort_the_process():
    """The clock bindings let the GIL go while they wait for the drain lock. A daemon thread
    taking it back while the interpreter finalizes is ended by a forced unwind; met in a
    noexcept destructor (py::gil_scoped_release's) that was std::terminate, SIGABRT after the
    script's work had succeeded (every run of this script). The bindings retake the GIL in
    their body (python/Interpreter.h without_gil)."""
    code = """
        import threading
        import torch
        from torch_neuronx import _C
        print(float((torch.ones(3, device="neuron") + 1).sum()))
        def read_clocks():
            while True:
                _C._device_clock_ns(0, drain=False)
        threading.Thread(target=read_clocks, daemon=True).start()
    """
    for _ in range(2):
        proc = run_script(code)
        assert proc.returncode == 0, exited_cleanly(proc) or proc.stderr[-3000:]
        assert proc.stdout.split("\n")[0] == "6.0", proc.stdout



def test_a_thread_in_a_draining_clock_read_at_exit_does_not_abort_the_process():
    """A daemon thread reading the device clock (which times the queued ops first) when the
    script ends: ended by the finalizing interpreter inside the cost model's Python, its unwind
    met the drain's GIL scope, which released a thread state no longer current: "Fatal Python
    error: PyGILState_Release", SIGABRT in every run of 5. The scope (python/Interpreter.h
    HeldInterpreter) leaves that state alone. (A daemon thread still issuing ops at exit aborts
    in CPU PyTorch as well: a tensor's destructor takes the GIL.)"""
    code = """
        import threading
        import torch, torch_neuronx
        x = torch.ones(3, device="neuron") + 1
        def read_clock():
            while True:
                torch_neuronx.device_time_ns()
        threading.Thread(target=read_clock, daemon=True).start()
        print("started")
    """
    for _ in range(3):
        proc = run_script(code)
        assert proc.returncode == 0, exited_cleanly(proc) or proc.stderr[-3000:]
        assert proc.stdout.split("\n")[0] == "started", proc.stdout

RANK = """
    import os, sys, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    rank = int(os.environ["RANK"])
    flag = os.environ["READY_FLAG"]       # both ranks start init together (2 s store timeout)
    if rank == 0:
        open(flag, "w").close()
    while not os.path.exists(flag):
        time.sleep(0.05)
    dist.init_process_group(backend="neuron", timeout=timedelta(seconds=2))
    if rank == 1:
        time.sleep(5)          # never calls the collective: rank 0 times out
        sys.exit(0)
    from torch_neuronx.distributed import backend
    try:
        dist.all_reduce(torch.ones(2, device="neuron"))
    except Exception:
        print("kept", len(backend._FAILED_CHECKS), flush=True)
        raise                   # and leave at once, as a script that does not catch it does
"""


def test_collective_timeout_on_the_neuron_group_exits_without_a_signal(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "OMP_NUM_THREADS": "1",
            "TORCH_CPP_LOG_LEVEL": "ERROR", "READY_FLAG": str(tmp_path / "ready")}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "TORCH_NEURONX_"))}
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(RANK)], cwd=ROOT,
                              env=dict(env, **base, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    try:
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    rank0 = subprocess.CompletedProcess([], procs[0].returncode, *results[0])
    assert procs[0].returncode == 1, exited_cleanly(rank0) or rank0.stderr[-3000:]
    assert "PeerLostError: all_reduce: rank 0 could not reach the other ranks of its group [0, 1]" in rank0.stderr
    assert "kept 1" in rank0.stdout
    assert procs[1].returncode == 0, results[1][1][-2000:]
