"""Ctrl-C during a sync is a KeyboardInterrupt, and the interrupted work stays charged.

SIGINT arrives while the cost model times a batch (the cost function raises the signal on
its first call). The sync raises KeyboardInterrupt (not a RuntimeError from the cost model),
the batch goes back to the queue, and the next sync charges it: its events read recorded
and the elapsed time equals an uninterrupted run's.
"""

from subprocess_run import exited_cleanly, run_script

SCRIPT = """
import signal, torch, torch_neuronx
# What Ctrl-C at a terminal meets: Python's handler, the signal not blocked. A child inherits an
# ignored or blocked SIGINT from its parent; in one parallel suite run every sync below came out
# "not interrupted", which is what either gives.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
x = torch.randn(128, 128, device="neuron")

def step():
    s, e = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    s.record(); y = (x @ x).relu(); e.record()
    return s, e, y

for _ in range(2):                       # warm: program cache filled, times steady
    s, e, y = step(); e.synchronize(); want = s.elapsed_time(e)

model = torch_neuronx._state["cost_model"]
calls = [0]
def interrupted(batch, at_sync):
    calls[0] += 1
    if calls[0] == 1:
        signal.raise_signal(signal.SIGINT)   # what Ctrl-C delivers
    return model(batch, at_sync)
torch_neuronx._C._set_cost_function(interrupted)

syncs = {"event.synchronize": lambda: e.synchronize(), "tensor.cpu": lambda: y.cpu(),
         "torch.neuron.synchronize": lambda: torch.neuron.synchronize(),
         "event.elapsed_time": lambda: s.elapsed_time(e)}
for name, sync in syncs.items():
    s, e, y = step()
    calls[0] = 0
    try:
        sync()
        print(name, "not interrupted")
    except KeyboardInterrupt:
        got = s.elapsed_time(e)
        print(name, "KeyboardInterrupt", "same-time" if got == want else f"{got} != {want}")
    except BaseException as ex:
        print(name, type(ex).__name__, str(ex)[:200])
"""


def test_issue_repro_ctrl_c_during_sync():
    proc = run_script(SCRIPT, timeout=120)
    assert exited_cleanly(proc) == "", exited_cleanly(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines == [f"{name} KeyboardInterrupt same-time" for name in
                     ("event.synchronize", "tensor.cpu", "torch.neuron.synchronize",
                      "event.elapsed_time")], proc.stdout
