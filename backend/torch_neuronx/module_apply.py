"""A Parameter or buffer shared by several modules is converted once when a model moves to or
from 'neuron'.

Parameters keep their identity through `Module._apply` (`.to("neuron")`, `.cpu()`,
`module.neuron()`, `to_empty`, dtype casts) because the extension tells PyTorch that CPU
and neuron tensors are shallow-copy compatible (aten/ShallowCopy.cpp), as c10 does for
CUDA. Two things remain that `_apply` does per registration, not per tensor:
- buffers are reassigned (`module._buffers[key] = fn(buf)`), so a buffer registered in two
  modules would become two tensors, converted, copied and charged twice;
- `fn` runs again on a shared Parameter's second registration: harmless for `.to()` (the
  tensor is already there) but `to_empty` allocates a second, transient empty tensor.
Within one conversion each shared tensor is converted once and every registration gets the
same result. Gradients are left to PyTorch (a swapped grad must not be remembered), and
conversions that never touch 'neuron' are left exactly as PyTorch does them.
"""

from __future__ import annotations

import torch


def _on_neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "neuron"


class _ConvertOnce:
    """`fn` of one `_apply` call; remembers its result for each shared tensor."""

    __slots__ = ("fn", "shared_ids", "results")

    def __init__(self, fn, shared_ids):
        self.fn = fn
        self.shared_ids = shared_ids
        self.results = {}       # id(tensor) -> (tensor, result); the tensor is kept alive

    def __call__(self, t):
        key = id(t)
        if key not in self.shared_ids:
            return self.fn(t)
        hit = self.results.get(key)
        if hit is not None and hit[0] is t:
            return hit[1]
        result = self.fn(t)
        if _on_neuron(t) or _on_neuron(result):
            self.results[key] = (t, result)
        return result


_original_apply = torch.nn.Module._apply


def _apply(self, fn, recurse=True):
    if not isinstance(fn, _ConvertOnce):
        # Only tensors registered more than once are remembered: a model without shared
        # Parameters or buffers takes PyTorch's own path untouched.
        seen, shared = set(), set()
        for m in (self.modules() if recurse else (self,)):
            for t in (*m._parameters.values(), *m._buffers.values()):
                if t is not None:
                    (shared if id(t) in seen else seen).add(id(t))
        if shared:
            fn = _ConvertOnce(fn, shared)
    return _original_apply(self, fn, recurse)


def install() -> None:
    if torch.nn.Module._apply is not _apply:
        torch.nn.Module._apply = _apply
