"""Eager ops checked against their lowered programs (issue 12's debug mode, STYLE rule 4).

    with torch_neuronx.check_semantics.checking():
        y = model(x)            # every exact op on the device: its lowering run through the
                                # ISA modules' NumPy semantics and compared with y's values

Inside `checking()` a TorchDispatchMode sees each ATen op on neuron tensors, with the values the
CPU kernel reads and writes (device memory is host memory: `_C._host_alias`, no copy charged).
Each op whose lowering computes it (`neuron_sim.lower.semantics.EXACT`, under the conditions of
`why_unchecked`) is checked by `check_lowered`, which raises a RuntimeError naming the op, its
shapes and the largest difference; an op that returns nothing (`_foreach_add_`,
`_fused_adamw_`) is compared by the values it wrote into its arguments. Other ops run
unchecked. Slow: for debugging rules. `NEURON_SIM_CHECK_SEMANTICS=1` turns it on for the whole
process (`install_if_set`).

Compiled graphs too: while checking, each launch of a torch.compile graph runs the graph node
by node, keeping every value, and checks the graph's ONE lowered program (what graph_cost
times) against them (`run_graph`, `check_lowered_sequence`); a graph with an op that is not
exact runs unchecked, its reason logged at INFO. The mode lets Dynamo compile under it
(`ignore_compile_internals`), else torch.compile would run every frame eagerly."""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from neuron_sim.lower import OpSpec
from neuron_sim.lower.registry import rule_for
from neuron_sim.lower.semantics import (EXACT, Uncheckable, check_lowered,
                                        check_lowered_sequence, why_unchecked)

from . import _C
from .cost import tensor_spec, torch_arg

logger = logging.getLogger("torch_neuronx.check_semantics")


def _schema_args(func, args, kwargs) -> tuple:
    """The op's arguments in schema order (kwarg-only ones too, as the C++ queue boxes them),
    without out= tensors, and the ids of the tensors it writes through them (`Tensor(a!)`,
    `Tensor(a!)[]`: an in-place foreach or fused optimizer returns none)."""
    values, written = [], set()
    for a in func._schema.arguments:
        writes = a.alias_info is not None and a.alias_info.is_write
        if a.kwarg_only and writes:
            continue
        if len(values) < len(args):     # (out= arguments are kwarg-only: after the positional)
            values.append(args[len(values)])
        elif a.name in kwargs:
            values.append(kwargs[a.name])
        else:
            values.append(a.default_value if a.has_default_value() else None)
        if writes:
            written.update(id(t) for t in _tensors(values[-1:]))
    return values, written


def _values(t: torch.Tensor) -> np.ndarray:
    """FP32 values, or an integer tensor's own (indices: run_lowered holds them as int32)."""
    host = (_C._host_alias(t) if t.device.type == "neuron" else t).detach()
    exact = host.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
    return (host if exact else host.to(torch.float32)).numpy().copy()


def _tensors(xs):
    for x in xs:
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            yield from (t for t in x if isinstance(t, torch.Tensor))


class _Check(TorchDispatchMode):
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Dynamo compiles under this mode (it runs a frame eagerly under any mode that does
        not say this): the mode is off while compiling and on while the compiled graph runs,
        whose launcher checks the graph as a whole (run_graph)."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        rule = rule_for(name)
        on_device = any(t.device.type == "neuron" for t in _tensors((*args, *kwargs.values())))
        if not on_device or rule is None or OpSpec(name).op not in EXACT.get(rule.__name__, ()):
            return func(*args, **kwargs)
        schema, wrote = _schema_args(func, args, kwargs)
        ins = [t for t in _tensors(schema) if t.device.type == "neuron" or t.dim() > 0]
        if not all(_C._holds_values(t) for t in ins if t.device.type == "neuron"):
            return func(*args, **kwargs)            # time-only tensors: no values to compare
        before = [_values(t) for t in ins]          # read before an in-place op writes them
        result = func(*args, **kwargs)
        outs = list(_tensors(result if isinstance(result, (tuple, list)) else [result]))
        op = OpSpec(name, tuple(torch_arg(a) for a in schema), tuple(tensor_spec(t) for t in outs))
        # an op returning nothing is compared by the arguments it wrote (their values after it)
        written = [] if outs else [i for i, t in enumerate(ins) if id(t) in wrote]
        if why_unchecked(op) is None:
            check_lowered(op, before, [_values(t) for t in outs] + [_values(ins[i])
                                                                    for i in written],
                          written=written)
        return result


@contextlib.contextmanager
def checking():
    """Check every exact eager op on the device, and every compiled graph launched, inside the
    block (see the module docstring)."""
    _active.append(True)
    try:
        with _Check():
            yield
    finally:
        _active.pop()


_active: list = []        # one entry per checking() block open


def active() -> bool:
    """Whether compiled graphs are checked now (a checking() block, or the setting)."""
    return bool(_active or _installed)


class _Recorder(torch.fx.Interpreter):
    """Runs a graph node by node and keeps each value as the node computes it (before a later
    write-back changes an input): {(node name, position): array}."""

    def __init__(self, gm):
        super().__init__(gm)
        self.values = {}

    def run_node(self, n):
        result = super().run_node(n)
        for i, v in enumerate(result if isinstance(result, (tuple, list)) else [result]):
            if isinstance(v, torch.Tensor) and (v.device.type != "neuron" or _C._holds_values(v)):
                self.values[(n.name, i)] = _values(v)
        return result


def run_graph(gm, args, name: str):
    """Runs compiled graph `gm` on `args` (as its launcher does) and checks its one lowered
    program, as graph_cost times it, against the values the graph computed
    (check_lowered_sequence: every graph output and write-back compared). A graph with an op
    that is not exact (or a higher-order op, or values the device does not hold) runs
    unchecked; the log says why (logger torch_neuronx.check_semantics, INFO)."""
    from .neuron_dynamo_backend.graph_cost import Target, lowering_ops
    from . import _visible
    if any(isinstance(n.target, torch._ops.HigherOrderOperator) for n in gm.graph.nodes):
        logger.info("compiled graph %s not checked: it has higher-order ops", name)
        return gm(*args)
    recorder = _Recorder(gm)
    out = recorder.run(*args)
    target = Target.of(_visible())
    walk = lowering_ops(gm, target)
    try:
        check_lowered_sequence(walk.ops, recorder.values, recorder.values,
                               live_outputs=walk.live, chip=target.chip)
    except (Uncheckable, ValueError) as e:       # ValueError: a value the device does not hold
        logger.info("compiled graph %s not checked: %s", name, e)
    else:
        logger.info("compiled graph %s checked: its %d ops' program agrees", name,
                    len(walk.ops))
    return out


_installed: list = []     # the mode install_if_set entered (once per process)


def install_if_set() -> bool:
    """Enter the check for the rest of the process when NEURON_SIM_CHECK_SEMANTICS=1 (once;
    `import torch_neuronx` calls it). Dispatch modes are per thread: it checks the ops of the
    thread that imported torch_neuronx."""
    from neuron_sim.config import get
    if not get("NEURON_SIM_CHECK_SEMANTICS"):
        return False
    if not _installed:
        _installed.append(_Check().__enter__())
    return True
