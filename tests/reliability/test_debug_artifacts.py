"""Debug artifacts (TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1) go to a per-user directory
that must be private, and each file is created exclusively without following links: a planted
symlink is never written through."""

import logging
import os
import re
import stat
import time

import pytest
import torch

from torch_neuronx import private_files


@pytest.fixture
def artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path / "dbg"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    private_files._warned.clear()
    torch._dynamo.reset()
    yield tmp_path / "dbg"
    torch._dynamo.reset()


def compile_named(name):
    torch._dynamo.reset()
    cf = torch.compile(lambda x: x.exp() + 1, backend="neuron", options={"model_name": name})
    cf(torch.ones(4, device="neuron"))


def test_default_directory_is_per_user(monkeypatch):
    assert private_files.user_temp_dir("neuron_backend").endswith(f"neuron_backend-{os.getuid()}")


def test_planted_symlinks_are_not_followed(artifacts, tmp_path, monkeypatch):
    # n counts the process's graphs, which depends on the tests that ran before: pin it at 0.
    from torch_neuronx.neuron_dynamo_backend import backend
    monkeypatch.setattr(backend, "_graph_name", lambda model, kind: f"{model}_0_{kind}_0")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    fx = artifacts / "fx_graphs" / "proc_0"
    fx.mkdir(parents=True, mode=0o700)
    (artifacts / "neff").mkdir(mode=0o700)
    # Names are <model>_<n>_inference_<n>_<timestamp> (n counts the process's graphs): plant
    # links for this second and the next ones.
    now = time.time()
    for s in range(0, 20):
        stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(now + s))
        for n in range(40):
            (fx / f"planted_{n}_inference_{n}_{stamp}.fx.txt").symlink_to(victim)
            (artifacts / "neff" / f"planted_{n}_inference_{n}_{stamp}.program.json").symlink_to(victim)
    compile_named("planted")
    assert victim.read_text() == "precious"
    written = [p for p in fx.iterdir() if not p.is_symlink()]
    assert len(written) == 1
    assert re.search(r"_\d{8}_\d{6}_1\.fx\.txt$", written[0].name), written   # the planted name was skipped
    assert stat.S_IMODE(os.stat(written[0]).st_mode) == 0o600
    assert len([p for p in (artifacts / "neff").iterdir() if not p.is_symlink()]) == 1


def test_a_directory_others_can_write_is_refused(artifacts, caplog):
    artifacts.mkdir(mode=0o700)
    os.chmod(artifacts, 0o777)
    with caplog.at_level(logging.WARNING, logger="torch_neuronx"):
        compile_named("shared")
    assert any("writable by group or others" in r.getMessage() for r in caplog.records)
    assert list(artifacts.iterdir()) == []


def test_two_graphs_in_the_same_second_keep_both(artifacts):
    compile_named("twice")
    compile_named("twice")
    assert len(list((artifacts / "fx_graphs" / "proc_0").glob("twice_*.fx.txt"))) == 2
