"""An NKI kernel inside a compiled graph (a `torch_neuronx.nki_op` custom op): one launch for the
whole graph, whose time includes the kernel's own simulated time (captured while the graph's
ops run uncharged) instead of the compile-time roofline estimate of the custom op."""

import pytest
import torch

import torch_neuronx.neuron_dynamo_backend as ndb
from compile_helpers import device_ns

nki = pytest.importorskip("nki", reason="the nki front end is not importable")
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from torch_neuronx.nki_op import nki_op  # noqa: E402


@nki.jit
def add_kernel(a, b):
    rows, cols = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    p = nl.tile_size.pmax
    for i in nl.affine_range(rows // p):
        x = nl.ndarray((p, cols), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((p, cols), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[i * p:(i + 1) * p, :])
        nisa.dma_copy(dst=y, src=b[i * p:(i + 1) * p, :])
        z = nl.ndarray((p, cols), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(dst=out[i * p:(i + 1) * p, :], src=z)
    return out


@nki_op("compiletest::add", mutates_args=())
def add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return add_kernel(x, y)


def test_nki_kernel_time_is_part_of_the_graph_launch():
    a = torch.randn(128, 256, device="neuron")
    b = torch.randn(128, 256, device="neuron")
    kernel_ns, ref = device_ns(lambda: add_op(a, b))
    assert kernel_ns > 0
    cf = torch.compile(lambda x, y: (add_op(x, y) * 2).relu(), backend="neuron", fullgraph=True)
    torch.testing.assert_close(cf(a, b).cpu(), (ref * 2).relu().cpu())
    (m,) = ndb.get_dynamo_metrics()
    assert m.custom_ops_ns > 0 and "compiletest::add" in m.estimated_ops
    ndb.reset_launch_stats()
    ns, _ = device_ns(lambda: cf(a, b))
    assert ndb.launch_stats()["launches"] == 1
    assert ns == m.sim_run_ns - m.custom_ops_ns + kernel_ns
