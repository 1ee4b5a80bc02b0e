"""An NKI kernel inside a compiled graph (a `torch_neuronx.nki_op` custom op): one launch for the
whole graph, whose time includes the kernel's own simulated time (captured while the graph's
ops run uncharged) instead of the compile-time roofline estimate of the custom op."""

import importlib.util
import pathlib
import sys

import pytest
import torch

import torch_neuronx.neuron_dynamo_backend as ndb
from device_time import device_ns

nki = pytest.importorskip("nki", reason="the nki front end is not importable")
from torch_neuronx.nki_op import nki_op  # noqa: E402


def _example_add_kernel():
    """The element-wise add of examples/nki/add.py (loaded by path: examples/ is not a package)."""
    key = "nki_examples.add"
    if key not in sys.modules:
        path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "nki" / "add.py"
        spec = importlib.util.spec_from_file_location(key, path)
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key].add_kernel


add_kernel = _example_add_kernel()


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
