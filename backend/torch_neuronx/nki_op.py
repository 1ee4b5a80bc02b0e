"""``torch_neuronx.nki_op``: an NKI kernel call as a PyTorch custom op.

    @torch_neuronx.nki_op("mylib::add", mutates_args=())
    def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return add_kernel(a, b)          # an @nki.jit kernel

builds on ``torch.library.custom_op``; the same function is registered as the fake kernel (the
NKI call traces shapes only on fake tensors), so the op works inside ``torch.compile``.
Training: ``add.register_autograd(backward, setup_context=...)`` as for any custom op.
Eager calls on ``neuron`` tensors run the kernel on the simulator and charge its simulated time
to the current stream (see nki/_torch.py).
"""

from __future__ import annotations

import torch

from nki import _dynamo

from .device_interface import after_import

_dynamo.install(after_import)   # @nki.jit kernels called inside torch.compile: one graph node


def nki_op(name, fn=None, *, mutates_args=(), device_types=None, schema=None):
    def wrap(f):
        op = torch.library.custom_op(name, mutates_args=mutates_args, device_types=device_types,
                                     schema=schema)(f)
        op.register_fake(f)
        return op

    return wrap(fn) if fn is not None else wrap


def wrap_nki(kernel):
    """Kept for AWS-compatible code: an ``@nki.jit`` kernel called inside ``torch.compile`` is
    already one graph node here (nki/_dynamo.py), so the kernel itself is returned
    (``wrap_nki(k)[grid](...)`` works as ``k[grid](...)``)."""
    return kernel


__all__ = ["nki_op", "wrap_nki"]
