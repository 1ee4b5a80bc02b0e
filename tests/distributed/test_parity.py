"""The tutorial's acceptance test: DDP, FSDP2 (fully_shard) and tensor parallel
(parallelize_module) training of a small GPT on 2 and 4 ranks gives the same losses and
parameters on neuron/neuron as on CPU/gloo; a sharded checkpoint saved on neuron loads on CPU."""

import json
import sys

import pytest
import torch

from dist_launch import ROOT, WORKERS, describe, launch

sys.path.insert(0, str(ROOT / "examples" / "distributed"))
import distributed_train as example  # noqa: E402


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def run(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"parity{request.param}")
    out, ckpt = tmp / "results.json", tmp / "ckpt"
    results, _ = launch(WORKERS / "parity.py", [out, ckpt], nprocs=request.param, timeout=170)
    assert all(r.returncode == 0 for r in results), describe(results)
    return request.param, json.loads(out.read_text()), ckpt


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp", "tp"])
def test_neuron_matches_cpu_gloo(run, parallelism):
    world, results, _ = run
    cpu, neuron = results[f"{parallelism}/cpu"], results[f"{parallelism}/neuron"]
    assert neuron["world"] == cpu["world"] == world
    assert neuron["losses"] == pytest.approx(cpu["losses"], rel=1e-5, abs=1e-6)
    assert neuron["losses"][0] != neuron["losses"][-1]          # it trained
    assert neuron["params"].keys() == cpu["params"].keys()
    for name in cpu["params"]:
        a, b = torch.tensor(cpu["params"][name]), torch.tensor(neuron["params"][name])
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert all(ns > 0 for ns in neuron["step_ns"])
    assert neuron["collectives"], "no collective was timed"


def test_sharded_checkpoint_loads_on_cpu(run):
    import torch.distributed.checkpoint as dcp
    _, results, ckpt = run
    model = example.GPT()
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=str(ckpt), no_dist=True)
    model.load_state_dict(state["model"])
    trained = results["fsdp/neuron"]["params"]
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value.double().flatten(), torch.tensor(trained[name], dtype=torch.float64),
                                   rtol=0, atol=0, msg=name)


def test_scale_patterns_match_what_the_run_logged(run):
    """The 64-rank estimator derives FSDP2's and DDP's collectives from the model; they must be
    the collectives the real run issued."""
    from neuron_sim.collectives import ddp_pattern, fsdp2_pattern, pattern_from_log
    world, results, _ = run
    model = example.GPT()
    root = [p.shape for n, p in model.named_parameters() if not n.startswith("blocks.")]
    units = [[p.shape for p in b.parameters()] for b in model.blocks]

    def key(calls):
        return sorted((c.op, c.nbytes, c.count) for c in calls)

    assert key(pattern_from_log(results["fsdp/neuron"]["collectives"])) == key(
        fsdp2_pattern(root, units, world))
    assert key(pattern_from_log(results["ddp/neuron"]["collectives"])) == key(
        ddp_pattern([p.numel() * 4 for p in model.parameters()]))
