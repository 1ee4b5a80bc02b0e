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


def test_a_stage_is_named_before_it_ends(capsys, monkeypatch):
    """Calibration and benchmarks name the long stage now running (a bar with no delay), then
    count it when it ends."""
    monkeypatch.setenv("NEURON_SIM_PROGRESS", "on")
    with P.Progress("calibration", unit=" groups", total=2, delay_s=0) as bar:
        bar.stage("C8")
        shown = capsys.readouterr().err
        bar.tick()
        bar.stage("C9-C13 mamba")
        after = capsys.readouterr().err
        bar.tick()
    assert "neuron-sim: calibration" in shown and "C8" in shown and "0/2" in shown
    assert "C9-C13 mamba" in after and "1/2" in after


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_benchmark_bar_stays_off_the_result_line(mode):
    """A benchmark's bar goes to stderr; stdout still ends with its RESULT line, and under auto
    (no terminal, as in CI or a pipe) stderr has no bar either."""
    env = dict(os.environ, NEURON_SIM_PROGRESS=mode)
    script = textwrap.dedent("""
        import sys
        import neuron_sim.progress
        neuron_sim.progress.DELAY_S = 0          # shown at once: these rounds take under 1 s
        sys.path.insert(0, "bench")
        import op_overhead as b
        b.OPS, b.ROUNDS = 200, 2
        b.main()
    """)
    r = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith("RESULT ratio_aee=")
    assert ("neuron-sim: rounds" in r.stderr) == (mode == "on")
