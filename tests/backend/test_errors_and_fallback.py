"""What user code can observe of Trainium's rules: CPU fallback, strict mode, mixed devices,
fork safety, 64-bit dtypes."""

import warnings

import pytest
import torch
import torch_neuronx


def test_unsupported_op_falls_back_once_with_warning():
    torch_neuronx.clear_op_tracking()
    a = torch.randn(4, 4, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        q, r = torch.linalg.qr(a)
        torch.linalg.qr(a)
    messages = [str(w.message) for w in caught if "fell back to CPU" in str(w.message)]
    assert messages == ["[Neuron] [WARNING] Operator 'aten::linalg_qr' fell back to CPU"]
    assert q.device.type == "neuron"
    assert torch.allclose((q @ r).cpu(), a.cpu(), atol=1e-5)
    assert "aten::linalg_qr" in torch_neuronx.get_fallback_ops()
    assert "aten::linalg_qr" not in torch_neuronx.get_executed_ops()
    (a + 1).sum().item()
    assert any(op.startswith("aten::add") for op in torch_neuronx.get_executed_ops())
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_fallback_ops() == set()


def test_strict_mode_raises_for_ops_failing_on_neuron(py):
    out = py("""
        import torch
        z = torch.ones(3, dtype=torch.complex64).to("neuron")  # a copy: fine
        try:
            z * 2
        except RuntimeError as e:
            print(e)
        q = torch.linalg.qr(torch.eye(3, device="neuron"))  # unimplemented: still falls back
        print("qr", q[0].device)
    """, {"TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": "1"}).stdout
    assert ("CPU fallback disabled because TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1. "
            "Operation aten::mul.Tensor failed on Neuron") in out
    assert "qr neuron:0" in out


def test_complex_falls_back_by_default():
    z = torch.ones(3, dtype=torch.complex64, device="neuron")
    with pytest.warns(UserWarning, match="fell back to CPU"):
        w = z * (1 + 1j)
    assert torch.equal(w.cpu(), torch.full((3,), 1 + 1j, dtype=torch.complex64))


def test_non_scalar_cpu_tensor_in_neuron_op():
    x = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match=r"Non-scalar tensor arg1 is on cpu device, expected neuron"):
        x + torch.ones(3)
    assert torch.equal((x + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))  # 0-dim is fine
    assert (x * 2).sum().item() == 6  # the process stays usable


def test_fork_after_init_asks_for_spawn():
    import multiprocessing as mp
    torch.ones(1, device="neuron")  # runtime initialised in the parent
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_touches_device, args=(queue,))
    proc.start()
    message = queue.get(timeout=60)
    proc.join(timeout=60)
    assert "Cannot re-initialize Neuron runtime in forked subprocess" in message
    assert "'spawn' start method" in message


def _child_touches_device(queue):
    try:
        torch.ones(1, device="neuron")
        queue.put("no error")
    except RuntimeError as e:
        queue.put(str(e))


def test_float64_and_int64_compute_in_32_bits():
    third = torch.ones(3, dtype=torch.float64, device="neuron") / 3
    assert third.dtype == torch.float64
    assert third[0].item() == float(torch.tensor(1 / 3, dtype=torch.float32))
    big = torch.tensor([2**31 + 5], dtype=torch.int64, device="neuron")
    assert big.dtype == torch.int64 and big.item() == 2**31 + 5  # storage keeps 64 bits
    with pytest.warns(UserWarning, match="computes int64 ops in 32 bits"):
        assert (big + 0).item() == -(2**31) + 5  # compute wraps like int32
    idx = torch.arange(10, device="neuron")
    assert idx.dtype == torch.int64 and idx.sum().item() == 45


def test_unknown_instance_lists_valid_names():
    with pytest.raises(ValueError, match="Valid instances: trn1.2xlarge, trn1.32xlarge, trn2.3xlarge"):
        torch_neuronx.instance.resolve("trn7")
