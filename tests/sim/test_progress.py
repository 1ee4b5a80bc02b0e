"""Progress display for long host work (issue 17): a cold model's lowering shows a bar on stderr
when NEURON_SIM_PROGRESS allows it, short or cached work and non-terminal runs print nothing."""

import os
import subprocess
import sys
import textwrap

import pytest

from neuron_sim import progress as P

pytest.importorskip("tqdm", reason="the progress bar is tqdm's (optional)")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _ticks(capsys, monkeypatch, mode, n=3):
    monkeypatch.setenv("NEURON_SIM_PROGRESS", mode)
    with P.Progress("work", unit=" items", total=n, delay_s=0) as bar:
        for _ in range(n):
            bar.tick(note="item")
    return capsys.readouterr().err


def test_on_shows_the_bar(capsys, monkeypatch):
    err = _ticks(capsys, monkeypatch, "on")
    assert "neuron-sim: work" in err and "/3 " in err


@pytest.mark.parametrize("mode", ["off", "auto"])     # auto: pytest's stderr is no terminal
def test_off_and_auto_without_a_terminal_print_nothing(capsys, monkeypatch, mode):
    assert _ticks(capsys, monkeypatch, mode) == ""


def test_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("NEURON_SIM_PROGRESS", "loud")
    with pytest.raises(ValueError, match="NEURON_SIM_PROGRESS='loud'.*auto, on, off"):
        P.enabled()


COLD_MODEL = textwrap.dedent("""
    import torch, neuron_sim.progress
    neuron_sim.progress.DELAY_S = 0          # show it at once: this model lowers in under 1 s
    m = torch.nn.Sequential(torch.nn.Linear(96, 80), torch.nn.Tanh()).to("neuron")
    x = torch.randn(24, 96, device="neuron")
    m(x).sum().backward(); torch.neuron.synchronize()
    print("cold done", flush=True)
    m(x).sum().backward(); torch.neuron.synchronize()
    print("warm done", flush=True)
""")


def test_cold_lowering_shows_programs_lowered():
    env = dict(os.environ, NEURON_SIM_PROGRESS="on", TORCH_NEURONX_NEFF_DISABLE_CACHE="1")
    r = subprocess.run([sys.executable, "-c", COLD_MODEL], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "cold done" in r.stdout and "warm done" in r.stdout
    assert "neuron-sim: lowering programs" in r.stderr
    assert " programs" in r.stderr and "aten::addmm" in r.stderr
