"""Each compile test starts from a clean Dynamo state, empty metrics and its own compile cache
(never the per-user default)."""

import os
import pathlib
import sys

import pytest
import torch

from torch_neuronx.neuron_dynamo_backend import reset_dynamo_metrics

# With pytest's importlib import mode no folder is on sys.path by itself: the tests import
# tests/shared/device_time.py, and the small GPT of examples/compile (shared with
# bench/compile_time.py).
_TESTS = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_TESTS / "shared"))
sys.path.insert(0, str(_TESTS.parent / "examples" / "compile"))


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


@pytest.fixture(scope="module", autouse=True)
def restore_dynamo_config():
    """The backend turns Dynamo's automatic dynamic shapes off for the process (static shapes
    only); other test modules get the setting back."""
    automatic_dynamic = torch._dynamo.config.automatic_dynamic_shapes
    yield
    torch._dynamo.config.automatic_dynamic_shapes = automatic_dynamic


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
