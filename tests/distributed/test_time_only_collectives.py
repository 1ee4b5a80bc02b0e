"""Time-only execution under torch.distributed: a 2-rank FSDP2 job on backend "neuron" takes
the same simulated step time with and without values (collectives then move no data)."""

import json

from dist_launch import WORKERS, launch


def test_fsdp2_step_time_equals_normal_execution():
    results, _ = launch(WORKERS / "time_only.py", nprocs=2, timeout=300)
    for r in results:
        assert r.returncode == 0, r.stderr[-3000:]
        times = json.loads(r.stdout.strip().splitlines()[-1])
        assert times["time_only"] == times["normal"], times     # to the nanosecond
        assert min(times["normal"]) > 100_000                     # real steps with collectives
