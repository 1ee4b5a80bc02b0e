"""`@nki.jit` kernels called directly inside `torch.compile(backend="neuron", fullgraph=True)`,
as AWS documents: each call is one graph node (`nki::kernel`), forward and backward, and an
RMSNorm whose forward and backward are NKI kernels trains equal to the PyTorch reference."""

import pathlib
import runpy

import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl
import torch_neuronx.neuron_dynamo_backend as ndb
from device_time import device_ns

EPS = 1e-6


ADD_EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "nki" / "add.py"

# the forward kernel is the RMSNorm example (y = x * rsqrt(mean(x^2) + eps) * w)
rmsnorm_fwd = runpy.run_path(str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "nki" / "rmsnorm.py"))[
    "rmsnorm_kernel"]


@nki.jit
def rmsnorm_bwd(g, x, w, eps):
    """With r = rsqrt(mean(x^2) + eps) recomputed per row: dx = r*(g*w) - x * r^3 * mean(g*w*x);
    dw = sum over rows of g*x*r (a TensorE matmul with a ones column)."""
    N, D = x.shape
    P = nl.tile_size.pmax
    dx = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    dw = nl.ndarray((D,), dtype=w.dtype, buffer=nl.shared_hbm)
    w_t = nl.ndarray((P, D), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_t, src=w.reshape((1, D)).broadcast(0, P))
    ones = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    dw_acc = nl.ndarray((1, D), dtype=nl.float32, buffer=nl.psum)
    for i in nl.sequential_range(N // P):
        rows = slice(i * P, (i + 1) * P)
        xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        gt = nl.ndarray((P, D), dtype=g.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[rows, :])
        nisa.dma_copy(dst=gt, src=g[rows, :])
        xx = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=xx, data1=xt, data2=xt, op=nl.multiply)
        mean_sq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=mean_sq, op=nl.add, data=xx, axis=1)
        nisa.tensor_scalar(dst=mean_sq, data=mean_sq, op0=nl.multiply, operand0=1.0 / D, op1=nl.add, operand1=eps)
        rt = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rt, op=nl.rsqrt, data=mean_sq)
        gw = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=gw, data1=gt, data2=w_t, op=nl.multiply)
        gwx = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=gwx, data1=gw, data2=xt, op=nl.multiply)
        s = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=gwx, axis=1)
        r2 = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=r2, data1=rt, data2=rt, op=nl.multiply)
        r3 = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=r3, data1=r2, data2=rt, op=nl.multiply)
        c = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=c, data=s, op0=nl.multiply, operand0=-1.0 / D, op1=nl.multiply, operand1=r3)
        gwr = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=gwr, data=gw, op0=nl.multiply, operand0=rt)
        dxt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=dxt, data=xt, op0=nl.multiply, operand0=c, op1=nl.add, operand1=gwr)
        nisa.dma_copy(dst=dx[rows, :], src=dxt)
        gxr = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=gxr, data=gt, op0=nl.multiply, operand0=rt, op1=nl.multiply, operand1=xt)
        nisa.nc_matmul(dst=dw_acc, stationary=ones, moving=gxr, accumulate=i > 0)
    dw_t = nl.ndarray((1, D), dtype=w.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=dw_t, src=dw_acc)
    nisa.dma_copy(dst=dw.reshape((1, D)), src=dw_t)
    return dx, dw


class NkiRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return rmsnorm_fwd(x, w, EPS)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return rmsnorm_bwd(g.contiguous(), x, w, EPS)


def reference(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


class Block(torch.nn.Module):
    def __init__(self, d, nki_norm):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.norm_w = torch.nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.nki_norm = nki_norm

    def forward(self, x):
        h = self.lin(x)
        h = NkiRMSNorm.apply(h, self.norm_w) if self.nki_norm else reference(h, self.norm_w)
        return (h * h).mean()


def test_kernel_call_is_one_node_with_fullgraph():
    x = torch.randn(256, 128, device="neuron")
    w = torch.randn(128, device="neuron")
    ndb.reset_dynamo_metrics()
    f = torch.compile(lambda x, w: rmsnorm_fwd(x * 2, w, EPS).relu(), backend="neuron", fullgraph=True)
    torch.testing.assert_close(f(x, w).cpu(), reference(x.cpu() * 2, w.cpu()).relu(), rtol=1e-5, atol=1e-5)
    (m,) = ndb.get_dynamo_metrics()
    assert "nki::kernel" in m.estimated_ops and m.custom_ops_ns > 0
    # the graph's one launch carries the kernel's own simulated time
    x2 = x * 2
    kernel_ns, _ = device_ns(lambda: rmsnorm_fwd(x2, w, EPS))
    ndb.reset_launch_stats()
    ns, _ = device_ns(lambda: f(x, w))
    assert ndb.launch_stats()["launches"] == 1
    assert ns == m.sim_run_ns - m.custom_ops_ns + kernel_ns


def test_kernel_grid_and_constant_arguments_in_graph():
    x = torch.randn(128, 64, device="neuron")
    w = torch.ones(64, device="neuron")
    f = torch.compile(lambda x: rmsnorm_fwd[1](x, w, 0.5) + rmsnorm_fwd(x=x, w=w, eps=EPS),
                      backend="neuron", fullgraph=True)
    xc, wc = x.cpu(), w.cpu()
    expected = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + 0.5) + reference(xc, wc)
    torch.testing.assert_close(f(x).cpu(), expected, rtol=1e-5, atol=1e-5)


def test_nki_rmsnorm_with_custom_backward_trains_like_pytorch():
    torch.manual_seed(0)
    ref = Block(128, nki_norm=False)
    model = Block(128, nki_norm=True)
    model.load_state_dict(ref.state_dict())
    model = model.to("neuron")
    step = torch.compile(model, backend="neuron", fullgraph=True)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    xs = [torch.randn(256, 128) for _ in range(3)]
    for x in xs:
        loss_ref = ref(x)
        loss_ref.backward()
        loss = step(x.to("neuron"))
        loss.backward()
        torch.testing.assert_close(loss.cpu(), loss_ref.detach(), rtol=1e-4, atol=1e-5)
        for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), p_ref.grad, rtol=1e-3, atol=1e-5, msg=name)
        opt_ref.step()
        opt.step()
        opt_ref.zero_grad()
        opt.zero_grad()
    # forward and backward each compiled once, each with its kernel as a graph node
    graphs = ndb.get_dynamo_metrics()
    assert sum("nki::kernel" in m.estimated_ops for m in graphs) >= 2


@nki.jit
def load_plus_one(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    return t


@nki.jit
def store_like(t, like):
    out = nl.ndarray(like.shape, dtype=like.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_kernel_calling_a_kernel_in_graph():
    @nki.jit
    def plus_one(x):
        return store_like(load_plus_one(x), x)     # kernels called from a kernel are inlined

    x = torch.randn(128, 8, device="neuron")
    f = torch.compile(lambda x: plus_one(x) * 2, backend="neuron", fullgraph=True)
    torch.testing.assert_close(f(x).cpu(), (x.cpu() + 1) * 2)


def test_kernel_returning_non_tensor_in_graph_is_a_clear_error(caplog):
    @nki.jit
    def shape_of(x):
        return x.shape[0]

    f = torch.compile(lambda x: shape_of(x), backend="neuron", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.Unsupported):     # Dynamo reports our error as the cause
        f(torch.randn(128, 4, device="neuron"))
    assert "NKI kernel shape_of returned ['int'] inside torch.compile" in caplog.text


def test_kernel_writing_its_input_in_graph_is_a_clear_error():
    @nki.jit
    def bump(x):
        t = load_plus_one(x)
        nisa.dma_copy(dst=x, src=t)              # writes its HBM input
        return store_like(t, x)

    x = torch.zeros(128, 8, device="neuron")
    f = torch.compile(lambda x: bump(x) * 2, backend="neuron", fullgraph=True)
    with pytest.raises(RuntimeError, match="NKI kernel bump wrote its tensor argument 0 inside torch.compile"):
        f(x)
    assert x.abs().sum().item() == 0          # the caller's tensor is untouched


def test_kernel_in_graph_with_any_backend_in_a_fresh_process():
    """Registration follows Dynamo's import, not the neuron backend's: aot_eager on CPU tensors."""
    import subprocess
    import sys
    code = ("import torch, runpy\n"
            f"k = runpy.run_path({str(ADD_EXAMPLE)!r})['add_kernel']\n"
            "a, b = torch.randn(128, 64), torch.randn(128, 64)\n"
            "f = torch.compile(lambda a, b: k(a, b) * 2, backend='aot_eager', fullgraph=True)\n"
            "torch.testing.assert_close(f(a, b), (a + b) * 2)\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.split() == ["ok"], r.stderr[-3000:]
