"""The simulated run time of one compiled graph: the single switch point between the backend
and the simulator's lowering.

`cost_graph(gm, target)` turns an ATen FX graph (from AOT Autograd) into a `GraphCost`: the
simulated time of the graph as ONE program on one logical core, with the busy time of each
engine, HBM bytes and spills. Only this function changes when the lowering does.

How: README.md, "How a graph is timed"; `ops` and `model_flops` describe the graph
(`analytic.GraphFacts`, added up in the same walk of the graph as the lowering's ops).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import operator
import pathlib

import torch
from torch._ops import HigherOrderOperator

import neuron_sim.lower as lower
from neuron_sim.hardware import get_chip
from neuron_sim.lower.cache import in_series

from ..cost import on_device, torch_arg
from ..fallback import DATA_DEPENDENT_SHAPE, NO_NEURON_KERNEL
from . import higher_order
from .analytic import GraphFacts
from .errors import NEFFCompilationError
from .graph_spec import GraphCost, Target  # noqa: F401  (Target: imported from here)

LOWERED = "neuron_sim.lower"
logger = logging.getLogger("torch_neuronx.neuron_dynamo_backend")


def model_sources():
    """(root, path) of the files the compiled graphs' times come from: the simulator's and
    torch_neuronx's sources (the graph walk describes ops through torch_neuronx.cost)."""
    import neuron_sim
    for root in (pathlib.Path(neuron_sim.__file__).parent, pathlib.Path(__file__).parents[1]):
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".json") and path.is_file():
                yield root, path


@functools.lru_cache(maxsize=1)
def cost_model_version() -> str:
    """A digest of model_sources(): the "compiler version" part of the compile-cache key, so a
    changed lowering, argument description or timing model never serves stale times."""
    h = hashlib.sha256(LOWERED.encode())
    for root, path in model_sources():
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


# ATen ops the simulated compiler cannot lower: those eager mode runs on CPU
_NO_LOWERING = frozenset(n.split(".")[0] for n in DATA_DEPENDENT_SHAPE + NO_NEURON_KERNEL)


def _check_lowerable(ops) -> None:
    unsupported = sorted({op.name.split(".")[0] for op in ops} & _NO_LOWERING)
    if unsupported:
        raise NEFFCompilationError(
            f"the graph uses {', '.join(unsupported)}, which has no Neuron lowering (in eager "
            "mode it runs on CPU). Move it out of the compiled region, or set "
            "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 (or options={'fallback_execution': "
            "True}) to run this graph eagerly.")


# ---- the lowered cost (neuron_sim.lower) -----------------------------------------------------

# The lowering's cache (it owns estimates and the fusion fallback), shared by every graph
_CACHE = lower.ProgramCache()


def _is_writeback(node) -> bool:
    """copy_(graph input, value computed in the graph): the functionalized graph's write of an
    in-place result (optimizer states, parameters) back into its input. A compiler stores the
    value into the input's buffer directly; there is no separate copy."""
    if node.target is not torch.ops.aten.copy_.default or len(node.args) < 2:
        return False
    dst, src = node.args[0], node.args[1]
    return (isinstance(dst, torch.fx.Node) and dst.op == "placeholder"
            and isinstance(src, torch.fx.Node) and src.op == "call_function")


# ops whose result is one value everywhere (a broadcast constant, given its shape)
_FILLS = frozenset(f"aten::{n}" for n in ("full", "full_like", "zeros", "zeros_like", "ones",
                                          "ones_like", "new_full", "new_zeros", "new_ones",
                                          "fill"))


def _is_op_call(node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)


def _is_folded_fill(node) -> bool:
    """A constant fill that only element-wise ops read (no graph output, no write-back): a
    compiler never materialises such a broadcast constant, it folds the value into each reader
    (an immediate or a broadcast scalar operand). The compiled AdamW step's lerp decomposes into
    addcmul(m, g - m, full_like(p, 1 - beta1)): 77 parameter-sized fills, written, spilled and
    re-read in the 20M GPT's optimizer graph."""
    return (_is_op_call(node) and lower.normalize_name(node.target.name()) in _FILLS
            and bool(node.users)
            and all(_is_op_call(u) and not _is_writeback(u)
                    and lower.is_elementwise(u.target.name()) for u in node.users))


class _Walk:
    """One walk of an ATen FX graph in execution order: the lowering's OpSpecs, the graph's
    outputs and facts. The subgraphs of higher-order ops are walked where the op runs, their
    ops joining the one program (`higher_order.py` says how each op is costed). Every value has
    its own identity, views included: a consumer of a view of an intermediate reads it from HBM
    (why: README.md, "Not (yet) modelled"). Write-backs of in-place results into graph inputs
    are stores of those results, not copies (`_is_writeback`). A constant fill read only by
    element-wise ops is a one-element value its readers broadcast (`_is_folded_fill`)."""

    def __init__(self, target: Target):
        self.target = target
        self.ops, self.live, self.facts = [], set(), GraphFacts()
        self.notes, self.estimated = [], set()   # what was assumed; HOPs not walked
        self.serial = []         # (name, Timing) of loops, added in series to the program
        # identity -> the identity of the value it is (a subgraph's inputs and outputs)
        self.alias = {}
        self.scope = ""          # prefix of the names in the subgraph being walked

    def ident(self, node, pos=0):
        if node.target is operator.getitem:
            node, pos = node.args
        key = (self.scope + node.name if self.scope else node.name, pos)
        return self.alias.get(key, key) if self.alias else key

    def spec(self, node, val, pos=0, **kw):
        if _is_folded_fill(node):        # the fill's value, broadcast by its readers
            return lower.TensorSpec((), val.dtype, (), id=self.ident(node, pos), **kw)
        return lower.TensorSpec(val.shape, val.dtype, val.stride(), id=self.ident(node, pos),
                                **kw)

    def value(self, node):
        """What the lowering reads of `node`'s value: a TensorSpec, a number or None."""
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return self.spec(node, val, on_device=on_device(val))
        if isinstance(val, (torch.SymInt, int, float, bool)):
            return int(val) if isinstance(val, torch.SymInt) else val
        return None

    def convert(self, a):
        return torch_arg(a, torch.fx.Node, self.value)

    def graph(self, gm: torch.fx.GraphModule) -> list:
        """Walks `gm` in the current scope; returns the identities of its outputs (None for
        an output that is not a value of the graph)."""
        outs = []
        for node in gm.graph.nodes:
            if node.op == "output":
                outs = [self.ident(n) if isinstance(n, torch.fx.Node) else None
                        for n in higher_order.flatten(node.args)]
            elif node.op != "call_function":
                continue
            elif isinstance(node.target, HigherOrderOperator):
                higher_order.cost(self, node)
            elif _is_constant_copy(node):
                self.alias[self.ident(node)] = self.ident(node.args[0])
            elif _is_writeback(node):
                self.facts.add(node.target.name(), _tensors((node.args, node.kwargs)),
                               _results(node))
                self.live.add(self.ident(node.args[1]))
            elif _is_op_call(node):
                self.op(node.target.name(), node.args, node.kwargs, node)
        return outs

    def op(self, name: str, args, kwargs, node, first: int = 0) -> None:
        """The op `name` reading `args`, `kwargs`; its results are `node`'s tensors from
        position `first` (a higher-order op's results may follow a token)."""
        vals = _values(node)
        self.facts.add(name, _tensors((args, kwargs)), _results(node, first))
        outs = tuple(self.spec(node, v, i) for i, v in enumerate(vals)
                     if i >= first and isinstance(v, torch.Tensor))
        self.ops.append(lower.OpSpec(name, tuple(self.convert(a) for a in args), outs,
                                     {k: self.convert(v) for k, v in kwargs.items()}))

    def inline(self, body: torch.fx.GraphModule, operands, scope: str) -> list:
        """Walks subgraph `body` with its inputs bound to `operands` (the caller's nodes or
        values), in the scope `scope`; returns the identities of its outputs."""
        outer = self.scope
        placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
        bound = [self.ident(a) if isinstance(a, torch.fx.Node) else None for a in operands]
        self.scope = f"{outer}{scope}/"
        for p, b in zip(placeholders, bound):
            if b is not None:
                self.alias[(self.scope + p.name, 0)] = b
        try:
            return self.graph(body)
        finally:
            self.scope = outer

    def child(self) -> "_Walk":
        """A walk of a subgraph apart (to time it alone), in this walk's scope: `absorb` it
        to make its ops part of this one."""
        walk = _Walk(self.target)
        walk.alias, walk.scope = self.alias, self.scope
        return walk

    def absorb(self, walk: "_Walk") -> None:
        self.ops += walk.ops
        self.live |= walk.live
        self.facts.merge(walk.facts)
        self.notes += walk.notes
        self.estimated |= walk.estimated
        self.serial += walk.serial

    def loop(self, body: torch.fx.GraphModule, trips: int, name: str, scope: str) -> None:
        """`body` run `trips` times in series (a loop over slices of its inputs): its ops as a
        program of their own (inputs and outputs in HBM), timed once and counted `trips`
        times. Its values have their own identities: a slice is not the tensor it slices."""
        walk = _Walk(self.target)
        walk.scope = f"{self.scope}{scope}/"
        outs = walk.graph(body)
        program, serial, _custom = lower_graph(walk.ops, {o for o in outs if o is not None},
                                               self.target.chip, self.target.lnc)
        if program is not None:
            serial = [(name, program)] + serial
        self.serial += [(n, _times(t, trips)) for n, t in serial + walk.serial]
        self.facts.merge(walk.facts, trips)
        self.notes += walk.notes
        self.estimated |= walk.estimated

    def time_ns(self, live) -> float:
        """Simulated ns of this walk's ops as a program of their own, `live` stored, and of
        its loops (run in series after it)."""
        program, serial, _custom = lower_graph(self.ops, set(live), self.target.chip,
                                               self.target.lnc)
        return sum(t.total_ns for t in _timings(program, serial + self.serial))

    def results(self, node, outs: list) -> None:
        """`node`'s results are the values `outs` (identities): its readers read those."""
        for i, o in enumerate(outs):
            if o is not None:
                self.alias[self.ident(node, i)] = o


def _values(node) -> list:
    val = node.meta.get("val")
    return [val] if isinstance(val, torch.Tensor) else (
        list(val) if isinstance(val, (tuple, list)) else [])


def _results(node, first: int = 0) -> list:
    return [v for v in _values(node)[first:] if isinstance(v, torch.Tensor)]


def _tensors(args) -> list:
    """The tensors (FX values) of the nodes in `args`."""
    ins = []
    torch.fx.node.map_arg(args, lambda n: ins.append(n.meta.get("val")))
    return [t for t in ins if isinstance(t, torch.Tensor)]


def _is_constant_copy(node) -> bool:
    """lift_fresh_copy of a graph constant (`torch.tensor([...])` in the function) that the
    graph only reads: the constant is part of the program, in HBM; its readers read it there.
    A compiler makes no copy (one that is a graph output is a copy: the caller owns it)."""
    return (node.op == "call_function"
            and node.target is torch.ops.aten.lift_fresh_copy.default
            and isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "get_attr"
            and all(u.op != "output" for u in node.users))


def lowering_ops(gm: torch.fx.GraphModule, target: Target) -> _Walk:
    """The walk of `gm` (the ops, the graph outputs' identities in `live`, facts, notes).
    `target`: what a choice between subgraphs is timed on (a cond's branches)."""
    walk = _Walk(target)
    walk.live.update(o for o in walk.graph(gm) if o is not None)
    return walk


def _is_aten(name: str) -> bool:
    """An op of PyTorch's (a higher-order op without a walk too: not a custom op whose kernel
    times itself at run time)."""
    return name.split("::", 1)[0] in ("aten", "prims", higher_order.NAMESPACE)


def lower_graph(ops, live, chip: str, lnc: int, cache=None) -> tuple:
    """(the program of `ops` as ONE lowered sequence or None, [(name, Timing)] of the ops timed
    apart and added in series, ns of those that are custom ops). Only `live` outputs are stored
    to HBM. `cache`: the ProgramCache to lower through (the compile backend's by default; the
    profiling advice prices a would-be graph with the eager cost model's)."""
    cache = _CACHE if cache is None else cache
    fused, alone, serial = [], [], []
    custom_ns = 0.0
    for op in ops:
        t = cache.lower_op(op, chip, lnc)   # the roofline when no rule lowers it
        if not t.estimated:
            fused.append(op)
            alone.append(t)
            continue
        serial.append((op.name, t))
        if _is_aten(op.name) or lower.has_rule(op.name):
            logger.info("neuron_sim.lower could not lower %s: %s", op.name, t.note)
        else:   # a custom op (NKI kernel): opaque, no rule (the advice's graphs have the copies)
            custom_ns += t.total_ns
    program = cache.lower_sequence(fused, chip, lnc, live_outputs=live,
                                   standalone=alone) if fused else None
    return program, serial, custom_ns


def _times(t, n: int):
    """Timing `t` run `n` times in series."""
    return dataclasses.replace(t, total_ns=t.total_ns * n, hbm_bytes=t.hbm_bytes * n,
                               flops=t.flops * n,
                               engine_ns={e: v * n for e, v in t.engine_ns.items()})


def _timings(program, serial) -> list:
    """The Timings of `lower_graph`'s answer: the program's and those of the ops apart."""
    return ([program] if program is not None else []) + [t for _n, t in serial]


def cost_graph(gm: torch.fx.GraphModule, target: Target) -> GraphCost:
    """Simulated time of the ATen graph `gm` as ONE program on one logical core of `target`.
    Raises NEFFCompilationError for graphs the simulated compiler cannot lower."""
    walk = lowering_ops(gm, target)
    _check_lowerable(walk.ops)
    program, serial, custom_ns = lower_graph(walk.ops, walk.live, target.chip, target.lnc)
    serial += walk.serial
    notes = ([program.note] if program is not None and program.note else []) + walk.notes
    note = f" ({'; '.join(notes)})" if notes else ""
    graph = in_series(_timings(program, serial))
    engines = dict.fromkeys(lower.ENGINES, 0.0) | graph.engine_ns
    extra = program.extra if program is not None else {}
    return GraphCost(total_ns=int(round(graph.total_ns + target.launch_ns)),
                     launch_ns=int(round(target.launch_ns)),
                     engine_busy_ns={e: int(round(v)) for e, v in engines.items()},
                     dma_bytes=int(graph.hbm_bytes), spill_bytes=int(extra.get("spill_bytes", 0)),
                     spills=int(extra.get("spills", 0)),
                     sbuf_peak_bytes=int(extra.get("sbuf_peak_bytes_per_partition", 0))
                     * get_chip(target.chip).sbuf_partitions,
                     custom_ops_ns=int(round(custom_ns)), tensor_flops=float(graph.flops),
                     cost_source=LOWERED + note,
                     estimated_ops=sorted({n for n, t in serial if t.estimated}
                                          | walk.estimated),
                     **walk.facts.fields())
