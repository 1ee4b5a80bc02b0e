"""``@nki.jit`` kernels called inside ``torch.compile``: one ``nki::kernel(tensors, call_id)`` graph
node per call (how Dynamo and AOT Autograd get there: README.md). ``call_id`` names an entry of
a side table holding the kernel, its launch grid and every non-tensor argument, so the op's
schema stays fixed whatever the kernel takes; the compiled graph's launch carries the kernel's
simulated time (neuron_dynamo_backend/backend.py ``_launcher``). Backward passes come from an
``autograd.Function`` whose ``forward``/``backward`` call kernels, as on AWS.

Limits: non-tensor arguments must be Python constants (int, float, bool, str, None, tuples);
a kernel inside a graph must return new tensors and not write its inputs in place (use
``torch_neuronx.nki_op(..., mutates_args=...)`` for that: AOT Autograd must know of the write).
"""

from __future__ import annotations

import sys

import torch
import torch.utils._pytree as pytree

from neuron_sim.nki import launch

# call_id -> (kernel uid, grid, treespec, static leaves (None where a tensor goes), tensor slots,
#             output structure: None until the fake kernel ran, then "one" / "tuple" / "list")
_CALLS: list = []


def _call_id(uid, grid, spec, static, slots):
    for i, c in enumerate(_CALLS):
        if c[0] == uid and c[1] == grid and c[2] == spec and c[4] == slots and _same(c[3], static):
            return i
    _CALLS.append([uid, grid, spec, static, slots, None])
    return len(_CALLS) - 1


def _same(a, b):
    return len(a) == len(b) and all(type(x) is type(y) and x == y for x, y in zip(a, b))


def _rebuild(call_id, tensors):
    uid, grid, spec, static, slots, _ = _CALLS[call_id]
    leaves = list(static)
    for slot, t in zip(slots, tensors):
        leaves[slot] = t
    args, kwargs = pytree.tree_unflatten(leaves, spec)
    kernel = launch.KERNELS[uid]
    return (kernel[grid] if grid != kernel.grid else kernel), args, kwargs


def _outputs(call_id, out):
    kind = "tuple" if isinstance(out, tuple) else "list" if isinstance(out, list) else "one"
    _CALLS[call_id][5] = kind
    outs = list(out) if kind != "one" else [out]
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise TypeError(f"NKI kernel {launch.KERNELS[_CALLS[call_id][0]].func.__name__} returned "
                        f"{[type(o).__name__ for o in outs]} inside torch.compile; a kernel in a "
                        "graph must return a tensor or a tuple of tensors")
    return outs


@torch.library.custom_op("nki::kernel", mutates_args=())
def kernel_op(tensors: list[torch.Tensor], call_id: int) -> list[torch.Tensor]:
    # the kernel gets copies: the graph treats this op as pure, so a write to an input must not
    # reach the caller's tensor unannounced; it is reported instead
    copies = [t.clone() for t in tensors]
    kernel, args, kwargs = _rebuild(call_id, copies)
    outs = _outputs(call_id, launch.run(kernel, args, kwargs))
    for i, (c, t) in enumerate(zip(copies, tensors)):
        if not torch.equal(c, t):
            raise RuntimeError(
                f"NKI kernel {kernel.func.__name__} wrote its tensor argument {i} inside "
                "torch.compile, where a kernel call is a pure graph node; return a new tensor "
                "instead, or wrap the call in torch_neuronx.nki_op(..., mutates_args=...) to "
                "declare the write")
    return [o.clone() if any(o is c for c in copies) else o for o in outs]


@kernel_op.register_fake
def _(tensors, call_id):
    kernel, args, kwargs = _rebuild(call_id, tensors)
    return _outputs(call_id, launch.run(kernel, args, kwargs))


def _in_graph(uid: int, grid: tuple, args: tuple, kwargs: dict):
    leaves, spec = pytree.tree_flatten((args, kwargs))
    slots = tuple(i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor))
    static = [None if isinstance(x, torch.Tensor) else x for x in leaves]
    call_id = _call_id(uid, grid, spec, static, slots)
    outs = torch.ops.nki.kernel([leaves[i] for i in slots], call_id)
    kind = _CALLS[call_id][5]
    return tuple(outs) if kind == "tuple" else list(outs) if kind == "list" else outs[0]


# _in_graph as Dynamo's nonstrict_trace marks it; made right after torch._dynamo.decorators loads
# (importing Dynamo costs seconds, so neither `import nki` nor `import torch` does it).
_TRACED: list = [None]


def register():
    if _TRACED[0] is None:
        # complete even mid `import torch._dynamo`
        from torch._dynamo.decorators import nonstrict_trace
        _TRACED[0] = nonstrict_trace(_in_graph)


def call_hook(kernel, args, kwargs):
    """Kernel.__call__ asks this first: under Dynamo the call becomes one ``nki::kernel`` node."""
    if not torch.compiler.is_compiling():
        if _TRACED[0] is None and "torch._dynamo" in sys.modules:
            register()
        return NotImplemented
    if not any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
        return NotImplemented       # a kernel called from a kernel (NKI tensors): inlined
    traced = _TRACED[0]
    if traced is None:
        raise RuntimeError("an NKI kernel was called inside torch.compile before the nki graph "
                           "hook was registered (torch_neuronx registers it when Dynamo loads); "
                           "import torch_neuronx before compiling, or call "
                           "nki._dynamo.register()")
    return traced(kernel.uid, kernel.grid, args, kwargs)


def install(after_import):
    """Called when torch_neuronx loads, with its `after_import(module, then)`: registers once
    Dynamo's decorators exist, whichever backend compiles first."""
    if call_hook not in launch.CALL_HOOKS:
        launch.CALL_HOOKS.append(call_hook)
    after_import("torch._dynamo.decorators", register)
