"""Start N ranks of a script the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR=127.0.0.1, a free MASTER_PORT), each a fresh
interpreter (spawn semantics), with a bounded wall-clock timeout after which every rank is
killed. Tests read each rank's exit code and output."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"


@dataclass
class RankResult:
    rank: int
    returncode: int | None     # None: killed at the timeout
    stdout: str
    stderr: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, args=(), nprocs=2, env=None, timeout=150, per_rank_env=None):
    """Run `script` on `nprocs` ranks; returns (results, wall seconds)."""
    port = free_port()
    procs = []
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("NEURON_RT_", "NEURON_SIM_", "LOCAL_", "GROUP_"))}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(nprocs),
                LOCAL_WORLD_SIZE=str(nprocs), GROUP_RANK="0", OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                PYTHONUNBUFFERED="1", TORCH_CPP_LOG_LEVEL="ERROR")
    base.update(env or {})
    start = time.monotonic()
    # Output goes to files, not pipes: a rank blocked on a full pipe would stall the collective
    # the others wait in.
    logs = []
    for rank in range(nprocs):
        env_r = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        env_r.update((per_rank_env or {}).get(rank, {}))
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        logs.append((out, err))
        procs.append(subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env_r,
                                      stdout=out, stderr=err, text=True, cwd=str(ROOT)))
    codes = {}
    for rank, p in enumerate(procs):
        try:
            codes[rank] = p.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            for other, q in enumerate(procs):   # only the processes this call started
                if q.poll() is None:
                    q.kill()
                    codes[other] = None          # killed at the timeout: it hung
            break
    results = []
    for rank, (p, (out, err)) in enumerate(zip(procs, logs)):
        p.wait()
        out.seek(0)
        err.seek(0)
        results.append(RankResult(rank, codes.get(rank, p.returncode), out.read(),
                                  err.read()))
        out.close()
        err.close()
    return results, time.monotonic() - start


def describe(results) -> str:
    return "\n".join(f"--- rank {r.rank} exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
                     for r in results)
