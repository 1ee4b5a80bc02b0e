"""Fixtures of the contract tests: `py` runs code in a fresh interpreter (device
configuration is per process); ranks are launched with tests/distributed's launcher
(importlib import mode does not put that folder on sys.path by itself)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "distributed"))


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("NEURON_", "TORCH_NEURONX_", "TORCH_DEVICE_BACKEND"))}
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        pytest.fail(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def py():
    return run_python
