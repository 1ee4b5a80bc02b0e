"""AWS documentation snippets (TorchNeuron and NKI) run unchanged on neuron-sim.

Each file in aws/ is one snippet with its source URL in its first comment, verbatim except where
that comment says otherwise (a driver marked "not from the docs" where the page's own driver
needs hardware or another framework). The torch_*.py files are not copies: each says which page
or AWS-linked torch-neuronx example it follows and makes that page's calls on the page's shapes
(where the stored copy of the page is cut before its code, it follows the page's description).
Each runs in its own process, as a user would run it, and its output is compared with what the
page shows or with CPU PyTorch / NumPy.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent / "aws"
BIN = pathlib.Path(sys.executable).parent

# Snippets that cannot run here, and why.
SKIP = {
    "nki_quickstart_test_program_xla.py": "written for PyTorch/XLA (torch_xla, xm.xla_device()), which "
    "TorchNeuron replaces with the 'neuron' device; the kernel of the same page runs in "
    "nki_quickstart_add_kernel.py",
    "profiling_xla_mlp.py": "written for PyTorch/XLA (torch_xla, torch_neuronx.experimental.profiler); "
    "TorchNeuron profiles with torch.profiler and torch_neuronx.profiling.NeuronConfig",
}


def _run(tmp_path, *cmd, env=None, timeout=300):
    full_env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                    TMPDIR=str(tmp_path), **(env or {}))
    for k in ("NEURON_SIM_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES"):
        if k not in (env or {}):
            full_env.pop(k, None)
    r = subprocess.run(list(cmd), cwd=tmp_path, env=full_env, capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def _py(tmp_path, name, env=None):
    return _run(tmp_path, sys.executable, str(HERE / name), env=env)


def test_every_snippet_names_its_source():
    files = sorted(p for p in HERE.iterdir() if p.suffix in (".py", ".sh"))
    assert len(files) >= 10
    for p in files:
        assert re.match(r"# Source: https://\S+", p.read_text()), f"{p.name} has no source URL"


@pytest.mark.parametrize("name", sorted(SKIP))
def test_snippets_that_need_pytorch_xla(name):
    assert (HERE / name).exists()
    pytest.skip(SKIP[name])


def test_nki_simulate_quickstart(tmp_path):
    _py(tmp_path, "nki_simulate_quickstart.py")        # asserts against a + b itself


def test_nki_execute(tmp_path):
    assert "nki.execute result matches X @ y" in _py(tmp_path, "nki_execute_matmul.py")


def test_nki_quickstart_kernel_prints_the_pages_result(tmp_path):
    out = _py(tmp_path, "nki_quickstart_add_kernel.py")
    # the page shows [[2. 2. 2.] ...] (4 x 3) for ones + ones
    assert out.count("[2., 2., 2.]") == 4 and "device='neuron:0'" in out and "float16" in out


def test_nki_tutorial_kernels(tmp_path):
    assert "matches CPU, eager and compiled" in _py(tmp_path, "nki_tensor_add_tiled.py")
    # the tutorial's tile sizes (N a multiple of 512) are Trn2's: the target is set the way the
    # NKI quickstart's confirmation step sets it
    out = _py(tmp_path, "nki_matmul_tutorial.py", env={"NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"})
    assert "match NumPy" in out


def test_legacy_neuronxcc_kernels(tmp_path):
    assert "matches NumPy" in _py(tmp_path, "legacy_neuronxcc_spmd_add.py")
    assert "matches NumPy" in _py(tmp_path, "nki_jit_legacy_example.py")


def test_ready_check_and_neuron_ls(tmp_path):
    out = _run(tmp_path, "sh", str(HERE / "nki_ready_check.sh"))
    assert out.strip() == "torch-neuronx and NKI are ready"
    if not shutil.which("neuron-ls", path=str(BIN)):
        pytest.skip("the neuron-ls command is not installed in this environment (pip install -e .)")
    out = _run(tmp_path, "sh", str(HERE / "neuron_ls_check.sh")).splitlines()
    assert out[0].startswith("instance-type: trn2.3xlarge") and "logical-neuroncore-config: 2" in out


def test_torch_neuron_module(tmp_path):
    # a trn2.3xlarge at LNC=2 has 4 logical NeuronCores, each one torch device
    assert _py(tmp_path, "torch_neuron_module.py").split() == ["4", "neuron"]


def test_distributed_all_reduce_under_torchrun(tmp_path):
    out = _run(tmp_path, sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(HERE / "torch_distributed_all_reduce.py"), env={"OMP_NUM_THREADS": "1"})
    values = sorted(re.findall(r"rank=(\d) local_rank=(\d) world_size=2: all_reduce=([\d.]+)", out))
    # on CPU: the sum over ranks of (rank + 1)
    assert values == [("0", "0", str(float(1 + 2))), ("1", "1", str(float(1 + 2)))], out


def test_torch_compile_quickstart_examples(tmp_path):
    out = _py(tmp_path, "torch_compile_quickstart.py")
    assert "Input shape:  torch.Size([2, 10])" in out and "Output shape: torch.Size([2, 5])" in out
    assert "compiled output matches CPU" in out
    out = _py(tmp_path, "torch_compile_device_placement.py").splitlines()
    assert out[:3] == ["Input device:  cpu", "Output device: neuron:0", "Neuron input -> Neuron output: neuron:0"]
    out = _py(tmp_path, "torch_compile_dtype_handling.py").splitlines()
    # int64/float64 are computed as 32-bit types in the graph and given back in the input dtype
    assert out[:3] == ["torch.int64 + torch.int64 = torch.int64", "torch.float64 + torch.float64 = torch.float64",
                       "torch.float32 + torch.float32 = torch.float32"]


def test_torch_compile_nki_integration(tmp_path):
    assert "NKI op inside torch.compile matches a * 2 + b" in _py(tmp_path, "torch_compile_nki_integration.py")


def test_torch_compile_distributed_under_torchrun(tmp_path):
    out = _run(tmp_path, sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(HERE / "torch_compile_distributed.py"), env={"OMP_NUM_THREADS": "1"})
    ranks = sorted(re.findall(r"\[Rank (\d)\] Output shape: \(4, 64\) on neuron:(\d), matches CPU", out))
    assert ranks == [("0", "0"), ("1", "1")], out


def test_torch_quickstart_first_model_three_modes(tmp_path):
    out = _py(tmp_path, "torch_quickstart_first_model.py")
    for mode in ("eager", "torch.compile", "mixed"):
        assert f"{mode}: output (8, 10) on neuron:0, matches CPU" in out


def test_torch_autocast(tmp_path):
    out = _py(tmp_path, "torch_autocast_mixed_precision.py")
    assert "autocast(neuron): output torch.float16" in out and "gradients equal" in out


def test_torch_profiler_with_neuronconfig(tmp_path):
    out = _py(tmp_path, "torch_profiler_neuronconfig.py")
    assert re.search(r"profile written: profile_output/\S+_pid_\d+/\S+/trace.json, \d+ device rows", out), out


def test_torch_tutorial_simple_training_small(tmp_path):
    # the page's sizes take minutes per iteration here; --small is the variant its header describes
    out = _run(tmp_path, sys.executable, str(HERE / "torch_tutorial_simple_training.py"), "--small")
    assert re.search(r"losses \(eager and compiled\) equal CPU within \S+: [\d.]+ -> [\d.]+ over 20 iterations", out), out


def test_torch_tutorial_distributed_ddp_fsdp_tp_under_torchrun(tmp_path):
    out = _run(tmp_path, sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(HERE / "torch_tutorial_distributed_ddp_fsdp_tp.py"), env={"OMP_NUM_THREADS": "1"})
    done = sorted(re.findall(r"rank (\d): (\w+) parameters after 10 steps match CPU", out))
    assert done == sorted((r, m) for r in "01" for m in ("ddp", "fsdp", "tp")), out


def test_torch_tutorial_hf_generate_compiled(tmp_path):
    out = _py(tmp_path, "torch_tutorial_hf_generate_compile.py")
    assert "8 new tokens per prompt, equal to CPU" in out, out


def test_torch_memory_stats(tmp_path):
    out = _py(tmp_path, "torch_memory_stats.py").splitlines()
    assert out == ["allocated 8388608 B, peak 8388608 B, reserved 8388608 B",
                   "after del: allocated 0 B; peak kept 8388608 B"], out
