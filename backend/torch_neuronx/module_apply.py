"""A buffer shared by several modules stays one tensor when a model moves to or from 'neuron'.

Parameters keep their identity through `Module._apply` (`.to("neuron")`, `.cpu()`,
`module.neuron()`, `to_empty`, dtype casts) because the extension tells PyTorch that CPU
and neuron tensors are shallow-copy compatible (aten/ShallowCopy.cpp), as c10 does for
CUDA. Buffers are reassigned instead (`module._buffers[key] = fn(buf)`), so a buffer
registered in two modules would be converted, copied and charged twice. Within one
conversion each such buffer is converted once and both modules get the same result.
CPU<->CUDA-style conversions that never touch 'neuron' are left exactly as PyTorch does them.
"""

from __future__ import annotations

import torch


def _on_neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "neuron"


class _ConvertOnce:
    """`fn` of one `_apply` call; remembers the result for each buffer it converted."""

    __slots__ = ("fn", "buffer_ids", "results")

    def __init__(self, fn, buffer_ids):
        self.fn = fn
        self.buffer_ids = buffer_ids
        self.results = {}       # id(buffer) -> (buffer, result); the buffer is kept alive

    def __call__(self, t):
        key = id(t)
        if key not in self.buffer_ids:
            return self.fn(t)   # parameters and grads: identity is kept by set_data
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
        # Only buffers registered more than once are remembered: the usual model takes
        # PyTorch's own path untouched.
        seen, shared = set(), set()
        for m in (self.modules() if recurse else (self,)):
            for b in m._buffers.values():
                if b is not None:
                    (shared if id(b) in seen else seen).add(id(b))
        if shared:
            fn = _ConvertOnce(fn, shared)
    return _original_apply(self, fn, recurse)


def install() -> None:
    if torch.nn.Module._apply is not _apply:
        torch.nn.Module._apply = _apply
