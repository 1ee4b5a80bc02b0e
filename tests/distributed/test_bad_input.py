"""Bad input gives clear errors naming the rank and the tensor on every rank, and nothing hangs
beyond the configured timeout (20 s in the workers)."""

import json

import pytest

from dist_launch import WORKERS, describe, launch

SCRIPT = WORKERS / "bad_input.py"


def result(r):
    line = next((line for line in r.stdout.splitlines() if line.startswith("RESULT ")), None)
    return json.loads(line[len("RESULT "):]) if line else None


def test_device_used_before_init_process_group_fails_on_every_rank():
    results, wall = launch(SCRIPT, ["device_before_init"], nprocs=2, timeout=90)
    assert all(r.returncode not in (0, None) for r in results), describe(results)
    assert "should not be initialized before init_process_group" in results[0].stderr
    assert "rank 0 failed to set up" in results[1].stderr
    assert wall < 60


def test_mismatched_world_size_names_both_ranks():
    results, wall = launch(SCRIPT, ["world_size_mismatch"], nprocs=2, timeout=90)
    assert all(r.returncode not in (0, None) for r in results), describe(results)
    for r in results:
        assert "mismatched world size" in r.stderr, describe(results)
    assert "rank 1 with world_size=3" in results[0].stderr


def test_more_ranks_than_the_instance_has_cores():
    results, _ = launch(SCRIPT, ["too_many_ranks"], nprocs=3, timeout=90,
                        env={"NEURON_SIM_INSTANCE": "trn1.2xlarge"})
    assert all(r.returncode not in (0, None) for r in results), describe(results)
    assert "rank 2 (LOCAL_RANK 2) has no NeuronCore" in results[2].stderr, describe(results)
    assert "--nproc_per_node" in results[2].stderr
    assert "rank 2 failed to set up" in results[0].stderr


def test_a_rank_that_dies_does_not_hang_the_others():
    results, wall = launch(SCRIPT, ["rank_dies"], nprocs=2, timeout=90)
    assert results[1].returncode == 3
    seen = result(results[0])
    assert seen is not None, describe(results)
    assert seen["error"] is not None
    assert seen["error"]["type"] == "PeerLostError"
    assert "rank 0 could not reach the other ranks of its group [0, 1]" in seen["error"]["message"]
    assert seen["seconds"] < 25          # the 20 s timeout at most


@pytest.fixture(scope="module")
def in_job():
    results, _ = launch(SCRIPT, ["in_job"], nprocs=2, timeout=90)
    assert all(r.returncode == 0 for r in results), describe(results)
    return [result(r) for r in results]


def test_shape_mismatch_names_ranks_and_shapes(in_job):
    for seen in in_job:
        err = seen["shape"]
        assert err["type"] == "CollectiveMismatchError"
        assert "rank 0 called all_reduce on 1 tensor(s), the first float32[4, 8]" in err["message"]
        assert "rank 1 called all_reduce on 1 tensor(s), the first float32[4, 9]" in err["message"]


def test_dtype_and_op_mismatch(in_job):
    for seen in in_job:
        assert "bfloat16" in seen["dtype"]["message"]
        assert "but rank 1 called broadcast" in seen["op"]["message"]


def test_tensor_on_the_wrong_device_is_named(in_job):
    for rank, seen in enumerate(in_job):
        err = seen["mixed_devices"]
        assert err["type"] == "CollectiveDeviceError"
        assert f"all_gather: rank {rank}, output tensor 1 (float32[2] on cpu)" in err["message"]


def test_group_still_works_after_a_refused_call(in_job):
    assert all(seen["after"] == [2.0, 2.0, 2.0] for seen in in_job)


def test_two_ranks_given_the_same_core():
    results, _ = launch(SCRIPT, ["same_core"], nprocs=2, timeout=90,
                        env={"NEURON_RT_VISIBLE_CORES": "3"})
    assert all(r.returncode not in (0, None) for r in results), describe(results)
    for r in results:
        assert "ranks 0 and 1 both own NeuronCore 3 of node 0" in r.stderr, describe(results)
