"""Graph breaks: the pieces Dynamo cannot capture run eagerly between compiled graphs, results
equal eager, and the user can see where the breaks are."""

import torch

import torch_neuronx.neuron_dynamo_backend as ndb
from device_time import device_ns


def with_breaks(x):
    y = (x @ x).relu()
    print("loss so far:", y.sum().item())       # .item() + print: a graph break
    z = y.softmax(-1) * 3
    torch._dynamo.graph_break()                   # an explicit one
    return z.exp().sum()


def test_breaks_split_into_graphs_and_match_eager():
    x = torch.randn(32, 32, device="neuron") / 8
    cf = torch.compile(with_breaks, backend="neuron")
    torch.testing.assert_close(cf(x).cpu(), with_breaks(x).cpu())
    records = ndb.get_dynamo_metrics()
    assert len(records) >= 3
    # Each graph says which user lines it covers: the breaks fall between them.
    assert all("test_graph_breaks.py:" in r.source for r in records if r.source)
    assert len({r.source for r in records}) == len(records)


def test_explain_lists_each_break_with_its_line():
    report = ndb.explain_graph_breaks(with_breaks, torch.randn(8, 8, device="neuron"))
    assert report.graph_count >= 3
    assert len(report.breaks) >= 2
    text = str(report)
    assert "test_graph_breaks.py:12 in with_breaks" in text     # the print / .item()
    assert "test_graph_breaks.py:14 in with_breaks" in text     # graph_break()


@torch._dynamo.disable
def eager_piece(a):
    return a.cos() + 1          # runs eagerly: each op charged on its own


def test_eager_pieces_are_charged_per_op_and_graphs_once():
    def mixed(x):
        a = (x * 2).sin()
        b = eager_piece(a)
        return (b * 3).tanh()
    x = torch.randn(64, 64, device="neuron")
    cf = torch.compile(mixed, backend="neuron")
    torch.testing.assert_close(cf(x).cpu(), mixed(x).cpu())
    ndb.reset_dynamo_metrics()
    ns, _ = device_ns(lambda: cf(x))
    stats = ndb.launch_stats()
    assert stats["launches"] == 2                 # the graphs before and after the break
    assert ns > stats["ns"]                       # plus the eager ops in between


def test_other_backends_never_trace_the_simulator():
    """A drain at a graph break runs the cost model (Python) while Dynamo's frame hook is active:
    with any backend, only the user's frames are compiled, never neuron-sim's (unshielded,
    aot_eager converted over two thousand frames here)."""
    from torch._dynamo.utils import counters
    x = torch.randn(32, 32, device="neuron") / 8
    frames = {}
    for backend in ("neuron", "aot_eager", "eager"):
        torch._dynamo.reset()
        counters.clear()
        cf = torch.compile(with_breaks, backend=backend)
        torch.testing.assert_close(cf(x).cpu(), with_breaks(x).cpu())
        frames[backend] = counters["frames"]["total"]
    assert frames["aot_eager"] == frames["eager"] == frames["neuron"] < 8, frames
