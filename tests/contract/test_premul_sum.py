"""ReduceOp.PREMUL_SUM on the neuron process group: each rank's input times the factor, then
summed (as NCCL), timed as a SUM of the same size; FSDP2 uses it for a gradient divide factor."""

import json
from pathlib import Path

WORKERS = Path(__file__).resolve().parent / "workers"


def test_premul_sum_collectives_and_fsdp_divide_factor():
    from dist_launch import describe, launch
    results, _ = launch(WORKERS / "premul_sum.py", nprocs=2, timeout=240)
    assert all(r.returncode == 0 for r in results), describe(results)
    rows = [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]
    for rank, row in enumerate(rows):
        assert row["all_reduce"] == [1.5, 3.0, 4.5, 6.0]             # 0.5 * (1 + 2) * x
        assert row["all_reduce_tensor_factor"] == [0.75, 1.5, 2.25, 3.0]
        assert row["reduce_scatter"] == [[6.0, 12.0], [18.0, 24.0]][rank]
        assert row["reduce_scatter_input_kept"] == [v * (rank + 1) for v in (1.0, 2.0, 3.0, 4.0)]
        sum_ns, premul_ns = row["ns"]
        assert sum_ns > 0 and premul_ns == sum_ns
        assert row["fsdp_ratio_ok"] is True
