"""backend="neuron" on 2 ranks: device semantics under torchrun, every collective's values,
functional collectives, DeviceMesh/DTensor, p2p, the owned-device rule, and collective time on
the stream (Event timing and profiler rows)."""

import json

import pytest

from dist_launch import WORKERS, describe, launch

from neuron_sim.collectives import estimate, fabric_for


@pytest.fixture(scope="module")
def ranks():
    results, _ = launch(WORKERS / "collectives.py", nprocs=2, timeout=150)
    assert all(r.returncode == 0 for r in results), describe(results)
    seen = []
    for r in results:
        line = next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))
        seen.append(json.loads(line[len("RESULT "):]))
    return seen


def test_each_rank_owns_one_core(ranks):
    for rank, seen in enumerate(ranks):
        assert seen["backend"] == "neuron"
        assert seen["device_count"] == 2          # LOCAL_WORLD_SIZE
        assert seen["current"] == rank            # LOCAL_RANK
        assert seen["visible"] == str(rank)       # NEURON_RT_VISIBLE_CORES set from LOCAL_RANK


def test_every_collective_gives_the_right_values(ranks):
    for seen in ranks:
        failed = [name for name, good in seen["ok"].items() if not good]
        assert not failed, failed
        assert len(seen["ok"]) == 21
    # gather and scatter cost the same on the root and elsewhere
    assert ranks[0]["gather_scatter_ns"] == ranks[1]["gather_scatter_ns"]


def test_touching_another_ranks_device_raises(ranks):
    for rank, seen in enumerate(ranks):
        msg = seen["other_device_error"]
        assert msg is not None
        assert f"neuron:{1 - rank} belongs to another rank" in msg
        assert f"rank {rank}, LOCAL_RANK {rank}" in msg


def test_collective_time_is_on_the_stream_and_in_the_profiler(ranks):
    want = estimate("all_reduce", 1 << 20, [0, 1], fabric_for("trn2.3xlarge")).ns
    for seen in ranks:
        assert seen["last_record"]["ns"] == want
        assert seen["all_reduce_1MiB_us"] == pytest.approx(want / 1e3, rel=0.01)
        assert "neuron::all_reduce" in seen["profiler_names"]


@pytest.fixture(scope="module")
def mesh2d():
    results, _ = launch(WORKERS / "mesh2d.py", nprocs=4, timeout=170)
    assert all(r.returncode == 0 for r in results), describe(results)
    return [json.loads(next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))[7:])
            for r in results]


def test_two_dimensional_mesh_subgroups(mesh2d):
    for rank, seen in enumerate(mesh2d):
        tp_peer, dp_peer = rank ^ 1, rank ^ 2
        assert seen["tp"] == [float(rank + tp_peer)] * 2
        assert seen["dp"] == [float(rank + dp_peer)] * 2
        assert seen["groups"] == [sorted([rank, tp_peer]), sorted([rank, dp_peer])]


def test_fsdp2_with_tensor_parallel_and_bf16_trains(mesh2d):
    losses = [seen["losses"] for seen in mesh2d]
    assert all(len(x) == 2 and all(v == v for v in x) for x in losses)   # finite, not NaN
    assert losses[0] == losses[1] and losses[2] == losses[3]            # TP peers agree
    assert losses[0][0] != losses[0][1]


def test_a_late_rank_makes_the_others_wait_in_simulated_time(mesh2d):
    waits = [seen["wait_ns"] for seen in mesh2d]
    assert waits[1] == 0 and all(w > 0 for i, w in enumerate(waits) if i != 1)
    assert len({seen["clock_ns"] for seen in mesh2d}) == 1   # everyone leaves together
