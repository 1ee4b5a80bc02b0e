"""The compile cache trusts only a directory of this user: per-user default (XDG), created 0700;
another user's or a group/other-writable directory is refused with one warning and compiles run
uncached; entries open without following links, regular files of this user only, size-capped;
every field is checked and anything odd is rebuilt (symlink to /dev/zero, FIFO, forged values,
total_ns = 2**70)."""

import json
import logging
import os
import stat

import pytest
import torch

import torch_neuronx.neuron_dynamo_backend as ndb
from torch_neuronx.neuron_dynamo_backend import cache
from torch_neuronx.neuron_dynamo_backend.graph_spec import GraphCost
from torch_neuronx import private_files

from subprocess_run import exited_cleanly, run_script

OTHER_UID = 65534           # 'nobody'
as_root = pytest.mark.skipif(os.getuid() != 0, reason="needs root to chown a file to another user")


def f(x):
    return (x.exp() + 1).sum(0)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "neff"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(d))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", raising=False)
    private_files._warned.clear()
    automatic_dynamic = torch._dynamo.config.automatic_dynamic_shapes
    torch._dynamo.reset()
    ndb.reset_dynamo_metrics()
    yield d
    torch._dynamo.reset()
    torch._dynamo.config.automatic_dynamic_shapes = automatic_dynamic


def compile_once(x):
    torch._dynamo.reset()
    y = torch.compile(f, backend="neuron")(x)
    torch.testing.assert_close(y.cpu(), f(x.cpu()))
    return ndb.get_dynamo_metrics()[-1]


def the_entry(d):
    (path,) = d.glob("*.neff.json")
    return path


def test_default_is_per_user_and_private(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_NEURONX_NEFF_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == str(tmp_path / "xdg" / "torch_neuronx" / "neff")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == str(tmp_path / "home" / ".cache" / "torch_neuronx" / "neff")
    made = cache.usable_dir()
    assert made == cache.cache_dir()
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700


def test_entries_are_reused_in_a_private_directory(cache_dir):
    x = torch.randn(16, 16, device="neuron")
    assert not compile_once(x).cache_hit
    assert compile_once(x).cache_hit
    assert stat.S_IMODE(os.stat(the_entry(cache_dir)).st_mode) == 0o600


@pytest.mark.parametrize("how", ["writable by others", pytest.param("another user's", marks=as_root)])
def test_an_unsafe_directory_is_refused_once_and_compiles_run_uncached(cache_dir, how, caplog):
    cache_dir.mkdir(mode=0o700)
    if how == "another user's":
        os.chown(cache_dir, OTHER_UID, OTHER_UID)
    else:
        os.chmod(cache_dir, 0o777)
    x = torch.randn(16, 16, device="neuron")
    with caplog.at_level(logging.WARNING, logger="torch_neuronx"):
        assert not compile_once(x).cache_hit
        assert not compile_once(x).cache_hit          # nothing was stored, nothing is read
    refused = [r.getMessage() for r in caplog.records if str(cache_dir) in r.getMessage()]
    assert len(refused) == 1, refused                  # warned once
    assert "owned by uid 65534" in refused[0] if how == "another user's" else "writable by group or others" in refused[0]
    assert list(cache_dir.iterdir()) == []


def test_a_directory_inside_another_users_directory_is_refused(tmp_path, monkeypatch):
    if os.getuid() != 0:
        pytest.skip("needs root to chown a directory to another user")
    parent = tmp_path / "theirs"
    parent.mkdir(mode=0o755)
    (parent / "neff").mkdir(mode=0o700)
    os.chown(parent, OTHER_UID, OTHER_UID)
    assert private_files.private_dir(str(parent / "neff"), "test") is None


def _plant_symlink_to_dev_zero(path):
    path.unlink()
    path.symlink_to("/dev/zero")


def _plant_fifo(path):
    path.unlink()
    os.mkfifo(path)


def _plant_huge(path):
    path.write_text(" " * (cache.MAX_ENTRY_BYTES + 1))


def _plant_other_users(path):
    if os.getuid() != 0:
        pytest.skip("needs root to chown a file to another user")
    os.chown(path, OTHER_UID, OTHER_UID)


def _forge(**fields):
    def plant(path):
        data = json.loads(path.read_text())
        data["payload"]["cost"].update(fields)
        path.write_text(json.dumps(data))
    return plant


@pytest.mark.parametrize("plant", [
    _plant_symlink_to_dev_zero, _plant_fifo, _plant_huge, _plant_other_users,
    _forge(total_ns=-5), _forge(total_ns="1000"), _forge(launch_ns=True),
    _forge(engine_busy_ns={"TensorE": 1.5}), _forge(tensor_flops=float("nan")),
    _forge(estimated_ops=[3]), _forge(extra_field=1), _forge(custom_ops_ns=2**61),
], ids=lambda p: p.__name__.replace("_plant_", "") if hasattr(p, "__name__") else None)
def test_odd_entries_are_rebuilt(cache_dir, plant):
    x = torch.randn(16, 16, device="neuron")
    first = compile_once(x)
    path = the_entry(cache_dir)
    good = json.loads(path.read_text())
    plant(path)
    again = compile_once(x)
    assert not again.cache_hit and again.sim_run_ns == first.sim_run_ns
    assert ndb.cache_stats()["corrupted"] == 1
    assert path.is_file() and not path.is_symlink() and json.loads(path.read_text()) == good
    assert compile_once(x).cache_hit                     # the rebuilt entry is used again


def test_total_ns_beyond_int64_does_not_kill_the_process(tmp_path):
    """total_ns = 2**70 used to reach the runtime and end the process with a pybind TypeError."""
    proc = run_script("""
        import json, pathlib, sys, torch
        import torch_neuronx.neuron_dynamo_backend as ndb
        def f(x):
            return (x.exp() + 1).sum(0)
        x = torch.randn(16, 16, device="neuron")
        torch.compile(f, backend="neuron")(x)
        (path,) = pathlib.Path(sys.argv[1]).glob("*.neff.json")
        data = json.loads(path.read_text())
        data["payload"]["cost"]["total_ns"] = 2**70
        path.write_text(json.dumps(data))
        torch._dynamo.reset()
        y = torch.compile(f, backend="neuron")(x)
        print("OK", float(y.sum()), ndb.cache_stats(), flush=True)
    """, env={"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff")}, args=[str(tmp_path / "neff")])
    assert proc.returncode == 0, exited_cleanly(proc) or proc.stderr[-3000:]
    assert "'corrupted': 1" in proc.stdout


@pytest.mark.parametrize("field,value", [("total_ns", 2**70), ("total_ns", 1.5), ("spills", None),
                                         ("dma_bytes", -1), ("model_flops", float("inf"))])
def test_graph_cost_checks_each_field(field, value):
    good = GraphCost(total_ns=10, launch_ns=1, engine_busy_ns={"TensorE": 3}, dma_bytes=4,
                     spill_bytes=0, spills=0, sbuf_peak_bytes=0, ops=1).to_json()
    assert GraphCost.from_json(dict(good)).total_ns == 10
    with pytest.raises(ValueError, match=field):
        GraphCost.from_json(dict(good, **{field: value}))
