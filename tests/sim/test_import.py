"""neuron_sim stands alone: it imports without torch."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import neuron_sim, neuron_sim.calibrate, neuron_sim.interpreter\n"
            "b = neuron_sim.ProgramBuilder('trn2')\n"
            "t = b.sbuf('t', (128, 64), 'float32'); b.memset(t, 0.0)\n"
            "print(neuron_sim.simulate(b.build(), reference=True).total_ns > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
