"""NKI kernels with PyTorch: neuron-device tensors (time charged to the stream), nki_op custom
ops (fake kernel from a shapes-only trace), torch.compile."""

import pytest

try:
    import torch
except Exception as e:      # torch not installed, or its 'neuron' backend failed to load (autoload)
    pytest.skip(f"torch is not importable here: {e}", allow_module_level=True)

import nki  # noqa: E402

from nki_examples import load_example  # noqa: E402

add = load_example("add")


def _neuron_available():
    try:
        torch.zeros(1, device="neuron")
        return True
    except Exception:       # the backend is not built in this checkout
        return False


needs_neuron = pytest.mark.skipif(not _neuron_available(), reason="the 'neuron' device backend is not built")


@needs_neuron
def test_kernel_on_neuron_tensors_charges_simulated_time_to_the_stream():
    a = torch.randn(256, 512, device="neuron")
    b = torch.randn(256, 512, device="neuron")
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    start.record()
    c = add.add_kernel(a, b)
    end.record()
    end.synchronize()
    assert c.device.type == "neuron"
    torch.testing.assert_close(c.cpu(), a.cpu() + b.cpu())
    sim_ms = nki.last_report().total_ns / 1e6
    # The end event's own record (one semaphore write) is on the stream too.
    empty0, empty1 = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    empty0.record(); empty1.record(); empty1.synchronize()
    record_ms = empty0.elapsed_time(empty1)
    assert 0 < record_ms < 1e-3
    assert start.elapsed_time(end) == pytest.approx(sim_ms + record_ms, rel=1e-3)


@needs_neuron
def test_nki_op_eager_and_compiled():
    from torch_neuronx.nki_op import nki_op

    @nki_op("nkitest::add2", mutates_args=())
    def add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return add.add_kernel(x, y)

    a = torch.randn(128, 256, device="neuron")
    b = torch.randn(128, 256, device="neuron")
    torch.testing.assert_close(add_op(a, b).cpu(), (a + b).cpu())
    f = torch.compile(lambda x, y: add_op(x, y) * 2, backend="neuron", fullgraph=True)
    torch.testing.assert_close(f(a, b).cpu(), ((a + b) * 2).cpu())


def test_fake_tensors_trace_shapes_only():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(256, 512, dtype=torch.bfloat16)
        out = add.add_kernel(a, a)
    assert tuple(out.shape) == (256, 512) and out.dtype == torch.bfloat16


@needs_neuron
def test_nki_op_autograd_through_register_autograd():
    from torch_neuronx.nki_op import nki_op

    @nki_op("nkitest::scaled_add", mutates_args=())
    def scaled_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return add.add_kernel(x, y)

    def setup_context(ctx, inputs, output):
        pass

    def backward(ctx, grad):
        return grad, grad

    scaled_add.register_autograd(backward, setup_context=setup_context)
    a = torch.randn(128, 64, device="neuron", requires_grad=True)
    b = torch.randn(128, 64, device="neuron", requires_grad=True)
    scaled_add(a, b).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), torch.ones(128, 64))
    torch.testing.assert_close(b.grad.cpu(), torch.ones(128, 64))


@needs_neuron
def test_kernel_appears_in_the_profiler():
    from torch.profiler import ProfilerActivity, profile
    a = torch.randn(128, 256, device="neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        add.add_kernel(a, a)
        torch.neuron.synchronize()
    assert "nki::add_kernel" in [e.name for e in prof.events()]


@pytest.mark.parametrize("by_keyword", [False, True], ids=["positional", "keyword"])
def test_kernel_writes_reach_non_contiguous_cpu_tensors(by_keyword):
    """A kernel writing a strided view (a column slice) gets its result into the caller's
    tensor whether the view was passed by position or by keyword."""
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def scale_into(x, out):
        t = nl.load(x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = torch.randn(128, 8)
    base = torch.zeros(128, 16)
    out = base[:, ::2]
    assert not out.is_contiguous()
    if by_keyword:
        nki.simulate(scale_into)(x, out=out)
    else:
        nki.simulate(scale_into)(x, out)
    torch.testing.assert_close(base[:, ::2], x * 3)
    assert torch.count_nonzero(base[:, 1::2]) == 0
