"""Each compile test starts from a clean Dynamo state, empty metrics and its own compile cache
(never the shared /tmp/neff_cache)."""

import os
import pathlib
import sys

import pytest
import torch

import torch_neuronx
from torch_neuronx.neuron_dynamo_backend import reset_dynamo_metrics

# The small GPT of examples/compile is shared by the tests and bench/compile_time.py.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "compile"))


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir(tmp_path_factory):
    """Module-scoped fixtures compile before the per-test fixture runs: they use this one."""
    previous = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = str(tmp_path_factory.mktemp("neff_cache"))
    yield
    if previous is None:
        os.environ.pop("TORCH_NEURONX_NEFF_CACHE_DIR", None)
    else:
        os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = previous


@pytest.fixture(autouse=True)
def clean_compile_state(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff_cache"))
    for name in ("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION",
                 "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "TORCH_NEURONX_RETAIN_DEVICE_MODE",
                 "TORCH_NEURONX_NEFF_DISABLE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    torch._dynamo.reset()
    reset_dynamo_metrics()
    yield tmp_path / "neff_cache"
    torch._dynamo.reset()


def device_ns(fn):
    """Simulated device time `fn()` adds, and its result."""
    torch.neuron.synchronize()
    start = torch_neuronx.device_time_ns()
    out = fn()
    torch.neuron.synchronize()
    return torch_neuronx.device_time_ns() - start, out
