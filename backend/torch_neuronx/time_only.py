"""Time-only execution: run a model for its simulated time without computing its values.

Inside `time_only()` (or with NEURON_SIM_TIME_ONLY=1 for the whole process), 'neuron' tensors
keep their shape, dtype, strides and storage identity but no values. Every op runs its Meta
kernel (shapes only) instead of the CPU kernel and is queued, lowered, fused (AEE) and timed
exactly as in normal execution, so a step takes the same simulated time to the nanosecond.
Device memory is counted against the simulated HBM (OutOfMemoryError as the device would
raise it), but tensors made in this mode reserve address space only: a model of any size
built here (`with torch.device("neuron"):`, or on `meta` then `to_empty(device="neuron")`)
uses no host memory for its weights.

What needs values raises `TimeOnlyError` naming the op: `.item()` and everything built on it
(`float(t)`, `if t:`, printing), copies to the host (`.cpu()`, `.numpy()`), and ops whose output
shape depends on values (`nonzero`, `unique`, `masked_select`). Where a model needs values
only to size its work, a declared assumption stands in: MoE experts' token counts (the groups
of `torch._grouped_mm`) follow `set_moe_routing` (uniform unless given). Tensors computed in
this mode (and tensors from before it that an op wrote) hold no values afterwards: reading them
outside the mode raises the same error until a copy fills them (`load_state_dict`).
"""

from __future__ import annotations

import contextlib

from . import _C


class TimeOnlyError(RuntimeError):
    """An op needs tensor values, which time-only execution does not compute."""


_C._set_time_only_error_type(TimeOnlyError)


def is_time_only() -> bool:
    """Whether ops on 'neuron' currently run for their time only."""
    return _C._time_only()


def set_time_only(enabled: bool) -> None:
    """Turn time-only execution on or off for the whole process (all threads and devices)."""
    _C._set_time_only(bool(enabled))


@contextlib.contextmanager
def time_only(enabled: bool = True):
    """Run the block for its simulated time only (see the module's docstring)."""
    previous = is_time_only()
    set_time_only(enabled)
    try:
        yield
    finally:
        set_time_only(previous)


# The MoE routing assumption of time-only mode: None (uniform) or each expert's share of tokens.
_routing: list[float] | None = None


def set_moe_routing(shares=None) -> None:
    """How time-only mode splits tokens among experts where a model routes by values (the
    group sizes of `torch._grouped_mm`): None for uniform routing, or one share per expert
    (normalised; e.g. measured expert loads of a real run)."""
    global _routing
    if shares is None:
        _routing = None
        return
    shares = [float(s) for s in shares]
    if not shares or any(s < 0 for s in shares) or sum(shares) <= 0:
        raise ValueError(f"set_moe_routing: shares must be non-negative with a positive sum, "
                         f"got {shares}")
    _routing = [s / sum(shares) for s in shares]


def moe_routing(experts: int) -> list[float]:
    """Each of `experts` experts' share of the routed tokens under the current assumption."""
    if _routing is None:
        return [1.0 / experts] * experts
    if len(_routing) != experts:
        raise ValueError(f"the MoE routing assumption has {len(_routing)} shares but the model "
                         f"routes to {experts} experts; call torch_neuronx.set_moe_routing() "
                         f"with {experts} shares, or None for uniform routing")
    return list(_routing)


def holds_values(tensor) -> bool:
    """False for a 'neuron' tensor computed (or written) in time-only mode."""
    return _C._holds_values(tensor)


def _install_repr_guard() -> None:
    """print() of a 'neuron' tensor without values raises one clear error (the formatter would
    otherwise fail inside whichever op it needs values for first); repr() gives a placeholder,
    as for meta tensors, so that logging, debuggers and notebooks showing containers keep
    working. A tensor with values prints normally, in time-only mode too."""
    import torch
    original = torch.Tensor.__repr__

    def valueless(t) -> bool:
        return t.device.type == "neuron" and not holds_values(t)

    def __repr__(self, *args, **kwargs):
        if valueless(self):
            return (f"tensor(..., device='{self.device}', size={tuple(self.shape)}, "
                    f"dtype={self.dtype}, values=None (time-only))")
        if self.device.type == "neuron" and is_time_only():
            with time_only(False):          # the formatter's ops need values
                return original(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    def __str__(self):
        if valueless(self):
            raise TimeOnlyError(
                "printing a neuron tensor needs its values, which time-only mode does not "
                f"compute (shape {tuple(self.shape)}, dtype {self.dtype}). Print its shape, or "
                "print it outside torch_neuronx.time_only().")
        return __repr__(self)

    torch.Tensor.__repr__ = __repr__
    torch.Tensor.__str__ = __str__


_install_repr_guard()
