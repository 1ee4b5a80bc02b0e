"""Higher-order ops in compiled graphs (higher_order.py): the ops of their subgraphs are costed
by the lowering like the graph's own, a cond by its slower branch, an op with no walk is
listed as estimated (never free); results equal eager's. A graph constant is not a copy."""

import operator

import pytest
import torch
import torch.utils.checkpoint as checkpoint
from torch._higher_order_ops.map import map as hop_map
from torch._higher_order_ops.while_loop import while_loop
from torch._ops import HigherOrderOperator
from torch.fx.experimental.proxy_tensor import make_fx

import torch_neuronx.neuron_dynamo_backend as ndb
from torch_neuronx.neuron_dynamo_backend import higher_order
from torch_neuronx.neuron_dynamo_backend.graph_cost import Target, cost_graph


def compiled(fn, *args, backward=False):
    """(result, the metrics of the graphs `fn` compiles to, by kind) for one call of fn
    compiled (and of the backward of its result's sum)."""
    ndb.reset_dynamo_metrics()
    torch._dynamo.reset()
    out = torch.compile(fn, backend="neuron")(*args)
    if backward:
        out.sum().backward()
    return out, {m.kind: m for m in ndb.get_dynamo_metrics()}


def operands(*shapes):
    torch.manual_seed(0)
    return [torch.randn(*s, device="neuron") for s in shapes]


class MLP(torch.nn.Module):
    def __init__(self, recompute: bool):
        super().__init__()
        self.up, self.down, self.recompute = torch.nn.Linear(512, 2048), \
            torch.nn.Linear(2048, 512), recompute

    def block(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))

    def forward(self, x):
        if self.recompute:
            return checkpoint.checkpoint(self.block, x, use_reentrant=False)
        return self.block(x)


def train_step(recompute: bool):
    torch.manual_seed(0)
    model = MLP(recompute).to("neuron")
    x = torch.randn(256, 512, device="neuron")
    _, graphs = compiled(model, x, backward=True)
    return [p.grad.cpu() for p in model.parameters()], graphs


def test_a_checkpointed_mlp_costs_its_forward_and_the_recompute():
    """Activation checkpointing (tag_activation_checkpoint, inlined by AOT Autograd's
    partitioner): the forward costs what the plain forward does, the backward adds the
    recomputed up-projection and GELU (less than a second forward; the down-projection's output
    is not needed by the gradient of a sum)."""
    plain_grads, plain = train_step(recompute=False)
    grads, ckpt = train_step(recompute=True)
    for g, ref in zip(grads, plain_grads):
        torch.testing.assert_close(g, ref)
    fw, bw = plain["forward"].sim_run_ns, plain["backward"].sim_run_ns
    assert ckpt["forward"].sim_run_ns == pytest.approx(fw, rel=0.05)
    assert 0 < ckpt["backward"].sim_run_ns - bw < fw - plain["forward"].launch_ns
    # the recomputed matmul: one of the forward's two of the same size (TensorE)
    def tensor_ns(m):
        return m.engine_busy_ns["TensorE"]
    recomputed = tensor_ns(ckpt["backward"]) - tensor_ns(plain["backward"])
    assert recomputed == pytest.approx(tensor_ns(plain["forward"]) / 2, rel=0.15)
    assert ckpt["backward"].estimated_ops == []


def slow_true(x, w):
    return (x @ w).relu()


def fast_false(x, w):
    return x.sin()


@pytest.mark.parametrize("pred", [True, False])
def test_a_cond_costs_its_slower_branch(pred):
    """Which branch runs is known at run time only: the graph is timed with the slower one
    (here the matmul), whatever the predicate, and the note says so."""
    def f(p, x, w):
        return torch.cond(p, slow_true, fast_false, (x, w))

    x, w = operands((256, 512), (512, 512))
    p = torch.tensor(pred)
    out, graphs = compiled(f, p, x, w)
    torch.testing.assert_close(out.cpu(), f(p, x.cpu(), w.cpu()), rtol=1e-4, atol=1e-4)
    _, branch = compiled(slow_true, x, w)
    m, alone = graphs["inference"], branch["inference"]
    assert m.sim_run_ns == alone.sim_run_ns > m.launch_ns
    assert (m.ops, m.model_flops) == (alone.ops, alone.model_flops)
    assert "the slower branch, true" in m.cost_source and m.estimated_ops == []


def test_a_cond_counts_the_loops_of_its_branches():
    """A branch's loops run in series after its program: a branch that is one map over 64
    slices is slower than one cos + add of the whole tensor (it was timed 0 us: its ops are
    all in the loop), so the graph costs it."""
    def f(p, x, w):
        return torch.cond(p, lambda x, w: hop_map(lambda r: r.sin() * 2, x),
                          lambda x, w: x.cos() + w, (x, w))

    x, w = operands((64, 1024), (64, 1024))
    p = torch.tensor(False)
    out, graphs = compiled(f, p, x, w)
    torch.testing.assert_close(out.cpu(), f(p, x.cpu(), w.cpu()))
    assert "the slower branch, true" in graphs["inference"].cost_source


def layer(x, w):
    return torch.nn.functional.gelu(x @ w)


region = torch.compiler.nested_compile_region(layer)


def test_a_nested_compile_region_costs_its_ops_each_call():
    """invoke_subgraph (a region called twice): the graph is timed as the same function
    without the region, inference and training."""
    def f(x, w):
        return region(region(x, w), w)

    def inlined(x, w):
        return layer(layer(x, w), w)

    x, w = operands((256, 512), (512, 512))
    out, graphs = compiled(f, x, w)
    torch.testing.assert_close(out.cpu(), inlined(x.cpu(), w.cpu()), rtol=1e-4, atol=1e-4)
    _, flat = compiled(inlined, x, w)
    assert graphs["inference"].sim_run_ns == flat["inference"].sim_run_ns
    assert graphs["inference"].ops == flat["inference"].ops == 4

    x.requires_grad_()       # (with only w's gradient, AOT Autograd inlines the region)
    w.requires_grad_()
    _, train = compiled(f, x, w, backward=True)
    _, flat = compiled(inlined, x, w, backward=True)
    for kind in ("forward", "backward"):
        assert train[kind].graph_id != flat[kind].graph_id      # the region is kept
        assert train[kind].sim_run_ns == flat[kind].sim_run_ns
        assert train[kind].ops == flat[kind].ops


TARGET = Target("trn2", "trn2.3xlarge", 1, 25000.0)


def by_hand(hop, before: tuple, after: tuple) -> torch.fx.GraphModule:
    """A graph calling `hop(*before, body, *after, x, w)`, body being slow_true (AOT Autograd
    inlines most wrappers before the backend sees them)."""
    x, w = torch.randn(256, 512), torch.randn(512, 512)
    body = make_fx(lambda x, w: (slow_true(x, w),), tracing_mode="fake")(x, w)
    fake = [n.meta["val"] for n in body.graph.nodes if n.op == "placeholder"]
    result = next(n for n in body.graph.nodes if n.op == "output").args[0][0].meta["val"]
    graph, root = torch.fx.Graph(), torch.nn.Module()
    root.body = body
    inputs = [graph.placeholder(name) for name in ("x", "w")]
    for node, val in zip(inputs, fake):
        node.meta["val"] = val
    call = graph.call_function(hop, (*before, graph.get_attr("body"), *after, *inputs))
    call.meta["val"] = (result,)
    out = graph.call_function(operator.getitem, (call, 0))
    out.meta["val"] = result
    graph.output((out,))
    return torch.fx.GraphModule(root, graph)


@pytest.mark.parametrize("hop, before, after", [
    ("invoke_subgraph", (), ("region",)), ("tag_activation_checkpoint", (), ()),
    ("wrap_activation_checkpoint", (), ()), ("wrap_with_set_grad_enabled", (False,), ()),
    ("wrap_with_autocast", ("cpu", None, False, False), ())])
def test_a_wrapper_costs_its_body_where_it_runs(hop, before, after):
    """Wrappers AOT Autograd usually inlines itself (checkpointing, grad mode, autocast): the
    graph costs what its body does alone."""
    gm = by_hand(getattr(torch.ops.higher_order, hop), before, after)
    wrapped, alone = cost_graph(gm, TARGET), cost_graph(gm.body, TARGET)
    assert wrapped == alone and alone.total_ns > alone.launch_ns


def test_a_while_loop_is_one_iteration_and_estimated():
    def f(x):
        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x.sin()),
                          (torch.tensor(0, device=x.device), x))[1]

    (x,) = operands((256, 512))
    out, graphs = compiled(f, x)
    torch.testing.assert_close(out.cpu(), x.cpu().sin().sin().sin())
    m = graphs["inference"]
    assert "higher_order::while_loop" in m.estimated_ops and "one iteration" in m.cost_source
    _, once = compiled(lambda x: x.sin(), x)
    assert m.sim_run_ns >= once["inference"].sim_run_ns


def test_a_map_is_its_body_once_per_slice():
    """map_impl (and scan): the body's program once per slice of the mapped dim, in series:
    the graph costs the launch and 64 times the body compiled alone."""
    (x,) = operands((64, 1024))
    out, graphs = compiled(lambda x: hop_map(lambda r: r.sin() * 2, x), x)
    torch.testing.assert_close(out.cpu(), x.cpu().sin() * 2)
    _, alone = compiled(lambda r: r.sin() * 2, x[0])
    m, body = graphs["inference"], alone["inference"]
    assert m.sim_run_ns - m.launch_ns == pytest.approx(64 * (body.sim_run_ns - body.launch_ns),
                                                      abs=64)
    assert m.ops == 64 * body.ops and m.estimated_ops == []
    assert "its subgraph's program 64 times in series" in m.cost_source


class Mystery(HigherOrderOperator):
    """A higher-order op higher_order.py has no entry for (it runs its subgraph)."""
    def __init__(self):
        super().__init__("mystery_for_tests")

    def __call__(self, body, *args):
        return super().__call__(body, *args)


mystery = Mystery()


def test_a_higher_order_op_with_no_walk_is_estimated_never_free():
    """The lowering's roofline of its operands and results, listed as estimated with the
    reason in the note (not a custom op whose kernel times itself)."""
    assert "mystery_for_tests" not in higher_order._RULES
    gm = by_hand(mystery, (), ())
    m = cost_graph(gm, TARGET)
    assert m.estimated_ops == ["higher_order::mystery_for_tests"]
    assert "timed by roofline (its subgraphs are not walked)" in m.cost_source
    assert m.total_ns > m.launch_ns and m.custom_ops_ns == 0


def test_a_custom_op_that_mutates_is_costed():
    """auto_functionalized_v2 of a custom op mutating an input: the op is costed (a custom op:
    roofline, replaced at run time by the time its kernel reports)."""
    @torch.library.custom_op("test_higher_order::add_one_into", mutates_args=("y",))
    def add_one_into(x: torch.Tensor, y: torch.Tensor) -> None:
        y.copy_(x + 1)

    @add_one_into.register_fake
    def _(x, y):
        return None

    def f(x):
        y = torch.empty_like(x)
        add_one_into(x, y)
        return y * 2

    (x,) = operands((256, 512))
    out, graphs = compiled(f, x)
    torch.testing.assert_close(out.cpu(), (x.cpu() + 1) * 2)
    m = graphs["inference"]
    assert "test_higher_order::add_one_into" in m.estimated_ops and m.custom_ops_ns > 0


def test_a_print_is_free_and_said_so():
    """with_effects(print): a host-side print, explicitly no device work."""
    def f(x):
        torch._higher_order_ops.print("step {}", 1)
        return x.sin()

    (x,) = operands((256, 512))
    _, graphs = compiled(f, x)
    _, plain = compiled(lambda x: x.sin(), x)
    assert graphs["inference"].sim_run_ns == plain["inference"].sim_run_ns


def test_a_graph_constant_is_read_not_copied():
    """lift_fresh_copy of a constant the function builds (torch.tensor([...])) is the constant,
    in the program: timed as the same graph reading it as an input."""
    values = [1.0, 2.0, 3.0, 4.0] * 128
    (x,) = operands((512, 512))
    out, graphs = compiled(lambda x: x * torch.tensor(values, device=x.device), x)
    torch.testing.assert_close(out.cpu(), x.cpu() * torch.tensor(values))
    c = torch.tensor(values, device="neuron")
    _, as_input = compiled(lambda x, c: x * c, x, c)
    assert graphs["inference"].sim_run_ns == as_input["inference"].sim_run_ns
    assert graphs["inference"].ops == 1


def test_a_higher_order_op_is_costed_once():
    with pytest.raises(ValueError, match="costed twice"):
        higher_order.costs("cond")(lambda walk, node: None)


def test_graphs_differing_only_in_a_branch_are_cached_apart():
    """The compile-cache key holds the subgraphs' code: a cond whose branches differ is a
    different graph (same top-level code, same input shapes)."""
    x, w = operands((256, 512), (512, 512))
    p = torch.tensor(True)
    def cheap(x, w):                      # reads both operands, as slow_true does
        return x + w[:256]

    _, first = compiled(lambda p, x, w: torch.cond(p, slow_true, cheap, (x, w)), p, x, w)
    _, second = compiled(lambda p, x, w: torch.cond(p, cheap, cheap, (x, w)), p, x, w)
    assert first["inference"].graph_id != second["inference"].graph_id
    assert not second["inference"].cache_hit
    assert second["inference"].sim_run_ns < first["inference"].sim_run_ns
