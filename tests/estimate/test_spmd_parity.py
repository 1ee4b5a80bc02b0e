"""A 4-rank FSDP2 training step simulated from one process (spmd.simulate_rank) against the real
4-process run of the same script: the same collectives and the same simulated step time."""

import json
import sys
from pathlib import Path

import pytest

import torch_neuronx
from torch_neuronx.distributed import spmd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "distributed"))
sys.path.insert(0, str(ROOT / "examples" / "distributed"))
sys.path.insert(0, str(HERE / "workers"))
import distributed_train as example  # noqa: E402
import fsdp_step  # noqa: E402
from dist_launch import describe, launch  # noqa: E402


@pytest.mark.skipif(torch_neuronx.get_instance() != "trn2.3xlarge",
                    reason="the 4-process run simulates the default trn2.3xlarge")
def test_one_process_fsdp2_step_matches_four_processes(tmp_path):
    out = tmp_path / "rank0.json"
    results, _ = launch(HERE / "workers" / "fsdp_step.py", [out], nprocs=4, timeout=170)
    assert all(r.returncode == 0 for r in results), describe(results)
    real = json.loads(out.read_text())
    with spmd.simulate_rank(4, 0):
        sim = example.train(example.parser().parse_args(fsdp_step.ARGS))

    def calls(c):
        return [(r["op"], r["nbytes"], r["algorithm"], r["ns"]) for r in c]

    assert calls(sim["collectives"]) == calls(real["collectives"])
    # the last step is steady state (the first pays lowering-independent warm-up only in neither)
    assert sim["step_ns"][-1] == pytest.approx(real["step_ns"][-1], rel=0.05)
