"""Scripts that could abort run in a fresh interpreter: the tests read its exit code (never a
signal), stdout and stderr."""

import os
import signal
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(code: str, env: dict | None = None, timeout: float = 120,
               args=()) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with none of the project's settings inherited except
    those in `env`."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("NEURON_", "TORCH_NEURONX_", "NKI_", "TORCH_DEVICE_BACKEND"))}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          env=full_env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def exited_cleanly(proc) -> str:
    """'' when the process exited by itself (any code); otherwise which signal ended it, with
    the end of its output, for the assertion message."""
    if proc.returncode >= 0:
        return ""
    return (f"killed by {signal.Signals(-proc.returncode).name}:\n{proc.stdout[-2000:]}\n"
            f"{proc.stderr[-3000:]}")
