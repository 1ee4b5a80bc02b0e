"""`neuron-ls` and `neuron-top` show the simulated instance as AWS's tools lay it out, and the
processes that use its devices (a real child process that puts tensors on `neuron`)."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHILD = """
import sys, threading, torch
def publisher(): return any(t.name == "neuron-sim-status" for t in threading.enumerate())
before = publisher()                              # import torch alone starts no thread
x = torch.ones(1024, 1024, device="neuron")      # 4 MiB of HBM
y = (x @ x).sum().item()
print("ready", before, publisher(), flush=True)
sys.stdin.read()                                  # until the test closes stdin
"""


def _env(tmp_path, **extra):
    env = dict(os.environ, TMPDIR=str(tmp_path), **extra)   # a private process registry
    for k in ("NEURON_SIM_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_RT_VISIBLE_CORES"):
        if k not in extra:
            env.pop(k, None)
    return env


class _Run:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def tool(tmp_path, monkeypatch, capsys):
    """Run neuron-ls / neuron-top in this process (their main), with a private registry."""
    import tempfile

    from neuron_sim.tools import neuron_ls, neuron_top
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def run(name, *args, **env):
        with monkeypatch.context() as m:
            for k in ("NEURON_SIM_INSTANCE", "NEURON_LOGICAL_NC_CONFIG"):
                m.delenv(k, raising=False)
            for k, v in env.items():
                m.setenv(k, v)
            capsys.readouterr()
            rc = {"neuron_ls": neuron_ls, "neuron_top": neuron_top}[name].main(list(args))
            out = capsys.readouterr()
        return _Run(rc, out.out, out.err)
    return run


def test_console_scripts_are_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["neuron-ls"] == "neuron_sim.tools.neuron_ls:entry"
    assert scripts["neuron-top"] == "neuron_sim.tools.neuron_top:entry"
    exe = shutil.which("neuron-ls", path=str(pathlib.Path(sys.executable).parent))
    if exe:                                   # installed (pip install -e .): the command itself runs
        assert "NEURON" in subprocess.run([exe], capture_output=True, text=True, timeout=60).stdout


def test_neuron_ls_lays_out_the_instance(tool):
    r = tool("neuron_ls")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("instance-type: trn2.3xlarge") and lines[2] == "logical-neuroncore-config: 2"
    assert lines[3].startswith("+--------+") and "| NEURON | NEURON |" in lines[4]
    assert "| DEVICE | CORES  | CORE IDS | MEMORY |" in lines[5]
    assert [l.split("|")[1:5] for l in lines if l.startswith("| 0 ")] == [[" 0      ", " 8      ", " 0-3      ", " 96 GB  "]]

    big = tool("neuron_ls", "--json-output", NEURON_SIM_INSTANCE="trn2.48xlarge", NEURON_LOGICAL_NC_CONFIG="1")
    devices = json.loads(big.stdout)
    assert len(devices) == 16 and devices[0]["nc_count"] == 8
    assert devices[1]["neuroncore_ids"] == list(range(8, 16))       # LNC=1: 8 logical cores per device
    assert devices[0]["connected_to"] == [1, 3, 4, 12]              # the 4x4 NeuronLink torus wraps


def test_bad_instance_is_reported_with_the_valid_ones(tool):
    r = tool("neuron_ls", NEURON_SIM_INSTANCE="trn9.huge")
    assert r.returncode == 2 and "trn9.huge" in r.stderr and "trn2.48xlarge" in r.stderr


def test_a_process_using_the_device_is_listed_and_leaves(tmp_path, tool):
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=_env(tmp_path), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().split() == ["ready", "False", "True"]
        deadline = time.time() + 30
        while time.time() < deadline:              # the child publishes about once a second
            ls = tool("neuron_ls")
            if f"| {child.pid} " in ls.stdout:
                break
            time.sleep(0.5)
        assert f"| {child.pid} " in ls.stdout, ls.stdout
        assert "PID" in ls.stdout and "COMMAND" in ls.stdout and "RUNTIME" in ls.stdout
        procs = json.loads(tool("neuron_ls", "-j").stdout)[0]["neuron_processes"]
        assert [p["pid"] for p in procs] == [child.pid] and "python" in procs[0]["command"]

        while True:                                 # a record from mid-matmul shows 8 MiB: wait for the next
            top = tool("neuron_top")                # not a terminal: one frame, then exit
            if "Total 4.0 MiB" in top.stdout or time.time() > deadline:
                break
            time.sleep(0.5)
        assert top.returncode == 0
        assert "NeuronCore v3d Utilization" in top.stdout and "Memory Usage Summary" in top.stdout
        assert "Device Used Memory   Total 4.0 MiB" in top.stdout
        assert f"{child.pid}:python" in top.stdout
        nc0 = next(l for l in top.stdout.splitlines() if l.strip().startswith("NC0 ") and "ms" in l)
        assert float(nc0.split()[1]) > 0                 # simulated device time of the matmul
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert f"| {child.pid} " not in tool("neuron_ls").stdout     # removed at exit


def test_neuron_top_rejects_a_bad_delay(tool):
    r = tool("neuron_top", "--delay", "0")
    assert r.returncode == 2 and "--delay" in r.stderr
