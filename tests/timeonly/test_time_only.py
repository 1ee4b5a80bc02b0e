"""Time-only execution (torch_neuronx.time_only): ops timed exactly as in normal execution,
no values computed, no host memory for weights, clear errors where values are needed."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from device_time import device_ns
from torch_neuronx import TimeOnlyError, holds_values, time_only

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
from gpt_model import GPT, GPTConfig, make_batch, train_step  # noqa: E402


def _gpt_step_times(timed_only: bool, compiled: bool, steps: int = 2) -> list[int]:
    """Simulated ns of each training step of the demo GPT, built and run in the given mode."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    cfg = GPTConfig()
    with time_only(timed_only):
        model = GPT(cfg).to("neuron")
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        x, y = (t.to("neuron") for t in make_batch(cfg, 8))
        run = torch.compile(model, backend="neuron") if compiled else model

        def step():
            if compiled:
                run(x, y).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            else:
                train_step(model, opt, x, y)
        return [device_ns(step)[0] for _ in range(steps)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_demo_gpt_step_time_equals_normal_execution(compiled):
    normal = _gpt_step_times(False, compiled)
    timed = _gpt_step_times(True, compiled)
    assert timed == normal          # to the nanosecond, first (cold) step included
    assert min(normal) > 1_000_000  # a real step of the demo GPT (about 2.3-2.8 ms)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_weights_of_a_model_built_in_time_only_mode_use_no_host_memory():
    before = _rss_bytes()
    with time_only():
        with torch.device("neuron"):
            big = torch.nn.Linear(16384, 16384, bias=False)        # 1 GiB of fp32 weights
        with torch.device("meta"):
            layers = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(8)])
        layers = layers.to_empty(device="neuron")                  # 2 GiB more
        out = layers(big(torch.randn(4, 16384, device="neuron"))[:, :8192])
        assert out.shape == (4, 8192) and out.device.type == "neuron"
        assert torch.neuron.memory_allocated() >= 3 << 30           # counted as device memory
    assert _rss_bytes() - before < 256 << 20
    assert not holds_values(big.weight) and not holds_values(out)
    del big, layers, out


def test_device_memory_is_simulated_hbm_out_of_memory_as_on_the_device():
    free, total = torch.neuron.mem_get_info()
    with time_only():
        with pytest.raises(torch.OutOfMemoryError, match=r"\(OOM\).*simulated HBM"):
            torch.empty(total // 2 + free, dtype=torch.uint8, device="neuron")
        x = torch.empty(free // 2, dtype=torch.uint8, device="neuron")   # half fits
    del x


def test_values_are_refused_with_the_op_named():
    x = torch.randn(4, 8, device="neuron")
    with time_only():
        y = x @ x.T
        with pytest.raises(TimeOnlyError, match=r"_local_scalar_dense \(Tensor.item\(\)"):
            y.sum().item()
        with pytest.raises(TimeOnlyError, match=r"a copy to the host"):
            y.cpu()
        with pytest.raises(TimeOnlyError, match=r"printing a neuron tensor.*shape \(4, 4\)"):
            print(y)
        assert "size=(4, 4)" in repr(y) and "values=None" in repr([y])   # logging keeps working
        assert "tensor([[" in str(x)           # a tensor with values prints, in the mode too
        with pytest.raises(TimeOnlyError, match=r"aten::nonzero needs tensor values.*output shape"):
            torch.nonzero(y)
        with pytest.raises(TimeOnlyError, match=r"aten::index.Tensor needs tensor values"):
            y[y > 0]
        z = (y + 1).relu()                 # the mode stays usable after each error
        assert z.shape == (4, 4)
    assert isinstance(TimeOnlyError("x"), RuntimeError)
    torch.testing.assert_close(x.cpu(), x.cpu())   # values from before the mode are kept


def test_tensors_without_values_refuse_reads_until_filled():
    torch.manual_seed(0)
    reference = torch.nn.Linear(8, 3)
    with time_only():
        model = torch.nn.Linear(8, 3, device="neuron")
    with pytest.raises(TimeOnlyError, match=r"computed in time-only mode and holds no values"):
        model(torch.randn(2, 8, device="neuron"))
    with pytest.raises(TimeOnlyError, match="holds no values"):
        model.weight.cpu()
    model.load_state_dict(reference.state_dict())     # whole-tensor copies define the values
    assert holds_values(model.weight) and holds_values(model.bias)
    x = torch.randn(2, 8)
    torch.testing.assert_close(model(x.to("neuron")).cpu(), reference(x))


def test_an_op_in_the_mode_takes_the_values_of_what_it_writes():
    w = torch.ones(3, device="neuron")
    kept = torch.ones(3, device="neuron")
    with time_only():
        w.mul_(2)                  # not computed: w's values are unknown afterwards
        kept + 1                   # only read
    assert not holds_values(w) and holds_values(kept)
    with pytest.raises(TimeOnlyError):
        w.cpu()
    torch.testing.assert_close(kept.cpu(), torch.ones(3))


def test_the_setting_turns_the_mode_on_for_the_process():
    code = textwrap.dedent("""
        import torch, torch_neuronx
        assert torch_neuronx.is_time_only()
        y = torch.ones(2, device="neuron") * 3
        try:
            y.sum().item()
        except torch_neuronx.TimeOnlyError as e:
            print("refused:", type(e).__name__)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "TORCH_NEURONX_"))}
    env["NEURON_SIM_TIME_ONLY"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "refused: TimeOnlyError" in proc.stdout
