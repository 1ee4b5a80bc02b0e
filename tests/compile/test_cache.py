"""The persistent compile cache: keyed by graph and target, reused by a second process, safe
under concurrent compiles, corrupted entries ignored and rebuilt, hits and misses counted."""

import json
import os
import subprocess
import sys
import textwrap

import torch

import torch_neuronx.neuron_dynamo_backend as ndb

# The same graph in every process.
RUN = textwrap.dedent("""
    def g(x, w):
        return torch.nn.functional.gelu(x @ w).sum(-1)
    x = torch.ones(64, 128, device="neuron")
    w = torch.ones(128, 128, device="neuron") / 128
    y = torch.compile(g, backend="neuron")(x, w)
    m = ndb.get_dynamo_metrics()[-1]
    report = {"stats": ndb.cache_stats(), "hit": m.cache_hit, "run_ns": m.sim_run_ns,
              "compile_ns": m.sim_compile_ns, "y": float(y.sum())}
""")
SCRIPT = ("import json, torch\nimport torch_neuronx.neuron_dynamo_backend as ndb\n" + RUN +
          "print(json.dumps(report))\n")


def run_process(cache_dir):
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(cache_dir))
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def result(proc):
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def entries(cache_dir):
    return sorted(p for p in cache_dir.glob("*.neff.json"))


def test_second_process_hits_and_concurrent_compiles_are_safe(clean_compile_state):
    cache_dir = clean_compile_state
    first, second = run_process(cache_dir), run_process(cache_dir)   # compile at the same time
    a, b = result(first), result(second)
    assert a["y"] == b["y"] and a["run_ns"] == b["run_ns"]
    assert len(entries(cache_dir)) == 1
    assert not list(cache_dir.glob("*.tmp"))                         # renames completed
    third = result(run_process(cache_dir))
    assert third["hit"] and third["stats"]["hits"] == 1 and third["stats"]["misses"] == 0
    assert third["run_ns"] == a["run_ns"]
    assert third["compile_ns"] < a["compile_ns"] or a["hit"]         # a hit only loads


def f(x):
    return (x.exp() + 1).sum(0)


def test_in_process_hit_after_reset(clean_compile_state):
    x = torch.randn(16, 16, device="neuron")
    torch.compile(f, backend="neuron")(x)
    torch._dynamo.reset()
    torch.compile(f, backend="neuron")(x)
    assert ndb.cache_stats() == {"hits": 1, "misses": 1, "corrupted": 0}
    first, second = ndb.get_dynamo_metrics()
    assert not first.cache_hit and second.cache_hit
    assert first.graph_id == second.graph_id
    assert second.sim_compile_ns < first.sim_compile_ns


def test_corrupted_entry_is_ignored_and_rebuilt(clean_compile_state):
    x = torch.randn(16, 16, device="neuron")
    torch.compile(f, backend="neuron")(x)
    (path,) = entries(clean_compile_state)
    good = path.read_text()
    for garbage in ("{not json", json.dumps({"format": "neuron-sim-graph/1"}), ""):
        path.write_text(garbage)
        torch._dynamo.reset()
        y = torch.compile(f, backend="neuron")(x)
        torch.testing.assert_close(y.cpu(), f(x).cpu())
        assert json.loads(path.read_text()) == json.loads(good)      # rebuilt in place
    assert ndb.cache_stats()["corrupted"] == 3


def test_key_depends_on_shapes_and_target(clean_compile_state):
    torch.compile(f, backend="neuron")(torch.randn(16, 16, device="neuron"))
    torch.compile(f, backend="neuron")(torch.randn(8, 16, device="neuron"))
    assert len(entries(clean_compile_state)) == 2


def test_key_covers_every_source_the_times_come_from():
    # the graph walk describes ops with torch_neuronx.cost.torch_arg: a change there moves
    # compiled times, so it must change the key (only neuron_sim and neuron_dynamo_backend did)
    from torch_neuronx.neuron_dynamo_backend.graph_cost import model_sources
    files = {(root.name, str(path.relative_to(root))) for root, path in model_sources()}
    assert {("torch_neuronx", "cost.py"), ("torch_neuronx", "neuron_dynamo_backend/graph_cost.py"),
            ("neuron_sim", "lower/rules/movement.py")} <= files


def test_cache_can_be_disabled(clean_compile_state, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    torch.compile(f, backend="neuron")(torch.randn(16, 16, device="neuron"))
    assert entries(clean_compile_state) == []


def test_unwritable_cache_dir_does_not_fail(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(blocker / "sub"))
    y = torch.compile(f, backend="neuron")(torch.ones(4, 4, device="neuron"))
    torch.testing.assert_close(y.cpu(), f(torch.ones(4, 4)))
