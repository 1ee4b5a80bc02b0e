"""How each higher-order op (torch.ops.higher_order.*) in an ATen graph is costed: a plain dict
from the op's name to one function, as the lowering's rules are (`@costs`). What each op costs
and why: README.md, "How a graph is timed". The ops of a subgraph are costed by the lowering
like the graph's own, walked where the op runs (`graph_cost._Walk`); an op with no entry is
never free: the lowering's roofline of its operands and results, listed in `estimated_ops`.

AOT Autograd inlines the autograd wrappers (tag_activation_checkpoint,
wrap_with_set_grad_enabled, wrap_with_autocast) before the backend sees the graph;
flex_attention refuses neuron tensors before compiling (torch: "only supported on CUDA, CPU,
HPU, or MPS devices").
"""
from __future__ import annotations

import functools

import torch

NAMESPACE = "higher_order"      # the op name an unwalked higher-order op is timed under
_RULES: dict = {}


def costs(*names):
    """Registers the function costing the higher-order ops `names`; twice is an error."""
    def register(fn):
        for name in names:
            if name in _RULES:
                raise ValueError(f"higher-order op {name} is costed twice: by "
                                 f"{_RULES[name].__name__} and {fn.__name__}")
            _RULES[name] = fn
        return fn
    return register


def cost(walk, node) -> None:
    """Adds the higher-order op `node` to `walk` (its ops, its results' identities)."""
    _RULES.get(node.target.name(), _unknown)(walk, node)


def _module(arg):
    """The GraphModule a get_attr node names (a subgraph), else None."""
    if not (isinstance(arg, torch.fx.Node) and arg.op == "get_attr"):
        return None
    found = functools.reduce(getattr, arg.target.split("."), arg.graph.owning_module)
    return found if isinstance(found, torch.fx.GraphModule) else None


def flatten(args) -> list:
    """The items of nested lists and tuples `args`, in order."""
    out = []
    for a in args:
        out.extend(flatten(a) if isinstance(a, (list, tuple)) else [a])
    return out


# Ops that run their one subgraph once, in place: (index of the subgraph, first operand)
_BODY = {"invoke_subgraph": (0, 2), "tag_activation_checkpoint": (0, 1),
         "wrap_activation_checkpoint": (0, 1), "wrap_with_set_grad_enabled": (1, 2),
         "wrap_with_autocast": (4, 5)}


@costs(*_BODY)
def run_body(walk, node) -> None:
    """The subgraph's ops, inlined: a compiler inlines a called region (a nested compile
    region called twice is its ops twice)."""
    body, first = _BODY[node.target.name()]
    walk.results(node, walk.inline(_module(node.args[body]), flatten(node.args[first:]),
                                   node.name))


@costs("cond")
def cond(walk, node) -> None:
    """The slower branch: which one runs is known at run time only, and a compile-time cost
    must not be optimistic. Each branch is timed alone (the lowering's program of its ops);
    the slower one's ops join the graph's program (a tie: the true branch). The note names
    it."""
    _pred, true_fn, false_fn, operands = node.args[:4]
    branches = []
    for which, fn in (("true", true_fn), ("false", false_fn)):
        branch = walk.child()
        outs = branch.inline(_module(fn), flatten(operands), f"{node.name}.{which}")
        branches.append((branch.time_ns(o for o in outs if o is not None), which, branch, outs))
    slow = max(branches, key=lambda b: b[0])      # max keeps the first (true) on a tie
    other = next(b for b in branches if b is not slow)
    walk.absorb(slow[2])
    walk.results(node, slow[3])
    walk.notes.append(f"{node.name}: the slower branch, {slow[1]} ({slow[0] / 1e3:.1f} us "
                      f"alone, {other[1]} {other[0] / 1e3:.1f} us)")


# Ops that run their subgraph once per slice of inputs along their first dim: (index of the
# subgraph, of the sliced inputs)
_LOOPS = {"map_impl": (0, 1), "scan": (0, 2)}


@costs(*_LOOPS)
def loop(walk, node) -> None:
    """The subgraph's program once per slice, in series (the trip count, the sliced inputs'
    first dim, is known at compile time). The note says so."""
    body, xs = _LOOPS[node.target.name()]
    trips = int(flatten(node.args[xs])[0].meta["val"].shape[0])
    walk.loop(_module(node.args[body]), trips, f"{NAMESPACE}::{node.target.name()}",
              node.name)
    walk.notes.append(f"{node.name}: its subgraph's program {trips} times in series")


@costs("while_loop")
def while_loop(walk, node) -> None:
    """One iteration (the condition and the body once): the trip count is known at run time
    only. Listed as estimated."""
    cond_fn, body_fn, carried, extra = node.args[:4]
    operands = flatten(carried) + flatten(extra)
    walk.inline(_module(cond_fn), operands, f"{node.name}.cond")
    walk.results(node, walk.inline(_module(body_fn), operands, f"{node.name}.body"))
    walk.estimated.add(f"{NAMESPACE}::while_loop")
    walk.notes.append(f"{node.name}: one iteration timed (the trip count is known at run "
                      "time only)")


@costs("with_effects")
def with_effects(walk, node) -> None:
    """with_effects(token, op, *args): `op` in the order of the graph's side effects. Its
    results follow the token."""
    op = node.args[1]
    if isinstance(op, torch._ops.OpOverload):
        walk.op(op.name(), node.args[2:], node.kwargs, node, first=1)
    elif op.name() not in _HOST_ONLY:
        _unknown(walk, node, f"with_effects of {op.name()}")


# Higher-order ops that do no device work
_HOST_ONLY = frozenset({"print"})     # torch._higher_order_ops.print: a host-side print


@costs(*_HOST_ONLY)
def host_only(walk, node) -> None:
    """No device work (explicitly free, not forgotten)."""


@costs("auto_functionalized", "auto_functionalized_v2")
def auto_functionalized(walk, node) -> None:
    """A custom op that mutates inputs, functionalized: the op, writing its results and the
    new values of the tensors it mutates (a compiler writes them in place; there is no copy).
    Its arguments in schema order; a mutated one (v2) is its base tensor."""
    op, kwargs = node.args[0], node.kwargs
    if not isinstance(op, torch._ops.OpOverload):
        _unknown(walk, node, f"auto-functionalized {op.name()}")
        return
    bases = kwargs.get("_all_bases", [])
    args = []
    for a in op._schema.arguments:
        index = kwargs.get(f"_{a.name}_base_index")
        args.append(kwargs[a.name] if a.name in kwargs else
                    bases[index] if isinstance(index, int) else None)
    walk.op(op.name(), args, {}, node)


def _unknown(walk, node, what: str = "") -> None:
    """No walk for this op: the lowering's roofline of its operands and results, estimated."""
    name = f"{NAMESPACE}::{node.target.name()}"
    walk.op(name, flatten(a for a in node.args if _module(a) is None), {}, node)
    walk.notes.append(f"{node.name}: {what or name} timed by roofline (its subgraphs are not "
                      "walked)")
