"""Bad input gives clear errors naming the rank and the tensor on every rank, and nothing hangs
beyond the configured timeout (20 s in the workers). Set-up checks that only need the store run
in this process (a HashStore stands for the job's TCPStore); the rest start real ranks."""

import json
from datetime import timedelta

import pytest
import torch.distributed as dist

from torch_neuronx.distributed import DistributedSetupError
from torch_neuronx.distributed import backend as neuron_backend
import torch_neuronx.distributed.placement as neuron_placement

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


def _rank_info(rank, world_size, core, node=0):
    return {"rank": rank, "world_size": world_size, "node": node, "core": core,
            "cores_per_node": 4, "error": None}


def test_mismatched_world_size_names_both_ranks():
    store = dist.HashStore()
    store.set("neuron_init/1", json.dumps(_rank_info(1, 3, 1)))
    with pytest.raises(DistributedSetupError, match=r"mismatched world size: rank 0 was started "
                       r"with world_size=2 but rank 1 with world_size=3"):
        neuron_backend._handshake(store, _rank_info(0, 2, 0), timedelta(seconds=5))


def test_a_missing_rank_is_named_after_the_timeout():
    store = dist.HashStore()
    with pytest.raises(DistributedSetupError, match=r"ranks \[1\] did not join"):
        neuron_backend._handshake(store, _rank_info(0, 2, 0), timedelta(seconds=0.2))


def test_two_ranks_given_the_same_core():
    store = dist.HashStore()
    store.set("neuron_init/1", json.dumps(_rank_info(1, 2, 3)))
    with pytest.raises(DistributedSetupError, match="ranks 0 and 1 both own NeuronCore 3 of node 0"):
        neuron_backend._handshake(store, _rank_info(0, 2, 3), timedelta(seconds=5))


def test_another_ranks_setup_error_stops_this_rank():
    store = dist.HashStore()
    store.set("neuron_init/1", json.dumps(dict(_rank_info(1, 2, 1), error="boom")))
    with pytest.raises(DistributedSetupError, match="rank 1 failed to set up: boom"):
        neuron_backend._handshake(store, _rank_info(0, 2, 0), timedelta(seconds=5))


def _torchrun(monkeypatch, instance, **env):
    """The environment torchrun gives a worker on `instance`, with no core selection of its own."""
    for name in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "NEURON_LOGICAL_NC_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NEURON_SIM_INSTANCE", instance)
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))


def test_more_ranks_than_the_instance_has_cores(monkeypatch):
    _torchrun(monkeypatch, "trn1.2xlarge", LOCAL_RANK=2, LOCAL_WORLD_SIZE=3)
    with pytest.raises(DistributedSetupError) as e:
        neuron_placement.from_environment(2, 3)
    assert "rank 2 (LOCAL_RANK 2) has no NeuronCore" in str(e.value)
    assert "trn1.2xlarge has 2 logical cores" in str(e.value)
    assert "--nproc_per_node" in str(e.value)


def test_placement_follows_torchrun(monkeypatch):
    _torchrun(monkeypatch, "trn2.48xlarge", LOCAL_RANK=5, LOCAL_WORLD_SIZE=8, GROUP_RANK=0)
    p = neuron_placement.from_environment(5, 8)
    assert (p.local_rank, p.local_world_size, p.core, p.global_core) == (5, 8, 5, 5)
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "8-15")     # a list the local ranks index
    assert neuron_placement.from_environment(5, 8).core == 13
