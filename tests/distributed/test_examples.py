"""The examples run as documented: the AWS tutorial's torchrun command line on neuron, and the
64-rank estimate (small model here; docs/distributed.md has the GPT-2-sized result)."""

import os
import re
import subprocess
import sys

from dist_launch import ROOT, free_port

EXAMPLES = ROOT / "examples" / "distributed"


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_RT_", "NEURON_SIM_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def test_torchrun_command_line_of_the_tutorial():
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    cmd = torchrun + ["--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                      str(free_port()), str(EXAMPLES / "distributed_train.py"),
                      "--parallelism", "ddp", "--device", "neuron", "--backend", "neuron"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=_env(), cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    steps = re.findall(r"step (\d) loss ([\d.]+)  simulated step ([\d.]+) us, (\d+) collectives",
                       out.stdout)
    assert [s[0] for s in steps] == ["0", "1", "2"], out.stdout
    assert all(float(s[2]) > 0 and int(s[3]) >= 1 for s in steps)


def test_estimate_64_ranks_from_one_rank():
    cmd = [sys.executable, str(EXAMPLES / "estimate_64.py"), "--layers", "2", "--dim", "64",
           "--heads", "4", "--vocab", "128", "--seq", "32"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env(), cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert last.startswith("RESULT ") and fields["ranks"] == "64"
    assert float(fields["compute_ms"]) > 0 and float(fields["comm_ms"]) > 0
    assert float(fields["step_serial_ms"]) > float(fields["step_overlapped_ms"])
    assert "64 ranks on trn2.48xlarge" in out.stdout
