"""One rank of an N-rank job simulated in one process (torch_neuronx.distributed.spmd): the
collectives are timed by neuron_sim.collectives on the job's fabric and move no data."""

import contextlib

import pytest
import torch
import torch.distributed as dist

import torch_neuronx
from neuron_sim.collectives import estimate, fabric_for, fsdp2_pattern
from neuron_sim.hardware import get_instance
from torch_neuronx.distributed import DistributedSetupError, clear_collective_log, collective_log
from torch_neuronx.distributed import spmd
from device_time import device_ns


# The job's fabric is a trn2.48xlarge whatever instance this process's device simulates: compute
# is timed per logical core, which is the same Trn2 core on every Trn2 instance.
JOB = "trn2.48xlarge"


@pytest.fixture
def trn2_48():
    if get_instance(torch_neuronx.get_instance()).chip.name != "trn2":
        pytest.skip("the device of this process simulates another chip than Trn2")


def test_all_reduce_of_rank_0_of_64_costs_the_model_time(trn2_48):
    with spmd.simulate_rank(64, 0, JOB) as fabric:
        t = torch.ones(1 << 20, device="neuron")
        ns, _ = device_ns(lambda: dist.all_reduce(t))
        assert fabric.cores == 64 and fabric.nodes == 1
    want = estimate("all_reduce", 4 << 20, range(64), fabric_for("trn2.48xlarge")).ns
    assert ns == want
    assert t[0].item() == 1.0          # no data moved: the other 63 ranks do not exist


def test_128_ranks_span_two_instances_over_efa(trn2_48):
    clear_collective_log()
    with spmd.simulate_rank(128, 5, JOB) as fabric:
        assert fabric.nodes == 2
        t = torch.ones(16 << 20, device="neuron")
        dist.all_reduce(t)
        torch.neuron.synchronize()
    rec = collective_log()[-1]
    assert rec.algorithm == "hierarchical" and len(rec.group) == 128
    assert rec.ns == estimate("all_reduce", 64 << 20, range(128), fabric).ns


def test_fsdp2_step_issues_the_fsdp2_pattern(trn2_48):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    clear_collective_log()
    with spmd.simulate_rank(64, 0, JOB):
        mesh = init_device_mesh("neuron", (64,))
        model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(3)]).to("neuron")
        for m in model:
            fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        x = torch.randn(8, 256, device="neuron")
        model(x).sum().backward()
        torch.neuron.synchronize()
        log = collective_log()
    got = {}
    for r in log:
        got[(r.model_op, r.nbytes)] = got.get((r.model_op, r.nbytes), 0) + 1
    want = {(c.op, c.nbytes): c.count
            for c in fsdp2_pattern([], [[(256, 256), (256,)]] * 3, world=64)}
    assert set(got) == set(want)
    assert got[("reduce_scatter", 64 * 4 * 257 * 4)] == 3
    assert all(r.group == tuple(range(64)) for r in log)


def test_rank_outside_the_job_and_a_second_group_are_refused(trn2_48):
    with pytest.raises(DistributedSetupError, match="rank 8 is outside a job of world_size=8"):
        with spmd.simulate_rank(8, 8, JOB):
            pass
    with spmd.simulate_rank(8, 0, JOB):
        with pytest.raises(DistributedSetupError, match="already initialized"):
            with spmd.simulate_rank(8, 1, JOB):
                pass
    assert not dist.is_initialized()
    with pytest.raises(DistributedSetupError, match="its chip is trn3"):
        with spmd.simulate_rank(8, 0, "trn3.48xlarge"):
            pass


def test_fsdp2_rank_of_a_large_job_in_time_only_mode_times_like_normal_mode(trn2_48):
    """A Hugging Face Llama sharded by FSDP2 as rank 5 of 64, built on 'meta' and materialised
    on the device: the same simulated step with and without data."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    from torch_neuronx.estimate import load_config
    if not hasattr(torch_neuronx, "time_only"):
        pytest.skip("this build has no time-only execution")
    cfg = load_config(dict(model_type="llama", hidden_size=256, intermediate_size=512,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           vocab_size=512))
    cfg._attn_implementation = "sdpa"

    def step_ns(time_only):
        mode = torch_neuronx.time_only() if time_only else contextlib.nullcontext()
        with mode, spmd.simulate_rank(64, 5, JOB):
            mesh = init_device_mesh("neuron", (64,))
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(cfg)
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            model.to_empty(device="neuron")
            if not time_only:
                for p in model.parameters():
                    torch.nn.init.normal_(p, std=0.02)
            ids = torch.zeros(2, 64, dtype=torch.long, device="neuron")
            clear_collective_log()   # after the initialisation (normal_ on DTensors broadcasts)
            ns, _ = device_ns(lambda: model(ids, labels=ids).loss.backward(), warmup=True)
            return ns, [(r.model_op, r.nbytes, r.ns) for r in collective_log()]

    normal, time_only = step_ns(False), step_ns(True)
    assert time_only == normal
    assert sum(op == "all_gather" for op, _, _ in normal[1]) >= 2 * 2 * 2   # 2 layers, 2 steps
