import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code: str, env: dict | None = None, expect_ok: bool = True) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (device configuration is per process)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("NEURON_", "TORCH_NEURONX_", "TORCH_DEVICE_BACKEND"))}
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    if expect_ok and proc.returncode != 0:
        pytest.fail(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def py():
    return run_python
