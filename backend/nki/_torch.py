"""Kernels called with torch tensors that live on the ``neuron`` device, or are fake.

- CPU tensors: NumPy views of them go to the simulator; results come back as CPU tensors.
- ``neuron`` tensors: the kernel runs on the simulator against CPU copies (uncharged), results
  go back to the device, and the kernel's simulated time is charged to the current stream as
  one launch named ``nki::<kernel>``, so ``torch.Event`` timing and the profiler see it.
  The target is the simulated instance's chip unless NEURON_PLATFORM_TARGET_OVERRIDE or
  ``platform_target=`` says otherwise.
- Fake/meta tensors (``torch.compile`` tracing, ``register_fake``): the kernel is traced for
  shapes only and returns empty tensors of the right shapes and dtypes.

Imported lazily: ``nki`` with NumPy inputs never imports torch.
"""

from __future__ import annotations

import os

from neuron_sim.nki import launch



def _torch_dtype(np_dtype):
    import torch
    name = str(np_dtype)
    return getattr(torch, name, torch.float32)


def _is_tensor(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "device") and hasattr(x, "detach")


def _is_fake(x):
    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:     # pragma: no cover
        FakeTensor = ()
    return isinstance(x, FakeTensor) or x.device.type == "meta"


def _map(x, f):
    if isinstance(x, tuple):
        return tuple(_map(v, f) for v in x)
    if isinstance(x, list):
        return [_map(v, f) for v in x]
    return f(x)


def hook(kernel, args, kwargs, opts):
    tensors = [a for a in list(args) + list(kwargs.values()) if _is_tensor(a)]
    if not tensors:
        return NotImplemented
    if any(_is_fake(t) for t in tensors):
        return _fake(kernel, args, kwargs, opts, tensors)
    dev = next((t.device for t in tensors if t.device.type == "neuron"), None)
    if dev is None:
        return _on_cpu(kernel, args, kwargs, opts)
    return _on_device(kernel, args, kwargs, opts, dev)


def _to_numpy(t):
    """CPU torch tensor -> NumPy sharing memory (bf16 through its int16 bits: NumPy has no bf16)."""
    import torch
    t = t.detach()
    if t.dtype == torch.bfloat16:
        from neuron_sim.nki import dtypes
        return t.contiguous().view(torch.int16).numpy().view(dtypes.bfloat16)
    return t.contiguous().numpy() if not t.is_contiguous() else t.numpy()


def _from_numpy(a):
    import numpy as np
    import torch
    from neuron_sim.nki import dtypes
    if a.dtype == dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _on_cpu(kernel, args, kwargs, opts):
    """CPU torch tensors in, CPU torch tensors out; in-place writes reach the input tensors."""
    import numpy as np
    conv = lambda a: _to_numpy(a) if _is_tensor(a) else a          # noqa: E731
    np_args = [conv(a) for a in args]
    out = launch.run(kernel, np_args, {k: conv(v) for k, v in kwargs.items()}, **opts)
    for a, n in zip(args, np_args):        # contiguous tensors shared memory with their arrays already
        if _is_tensor(a) and not a.is_contiguous():
            a.copy_(_from_numpy(n))
    return _map(out, lambda x: _from_numpy(x) if isinstance(x, np.ndarray) else x)


def _fake(kernel, args, kwargs, opts, tensors):
    import numpy as np
    import torch
    like = tensors[0]

    def shape_only(a):
        if _is_tensor(a):
            dt = str(a.dtype).replace("torch.", "")
            return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=_np_dtype(dt)), shape=tuple(a.shape),
                                                   strides=(0,) * a.dim())
        return a

    o = dict(opts, numerics=False, timing=False)
    out = launch.run(kernel, [shape_only(a) for a in args], {k: shape_only(v) for k, v in kwargs.items()}, **o)
    return _map(out, lambda a: torch.empty(a.shape, dtype=_torch_dtype(a.dtype), device=like.device)
                if isinstance(a, np.ndarray) else a)


def _np_dtype(name):
    from neuron_sim.nki import dtypes
    return dtypes.normalize(name)


def _on_device(kernel, args, kwargs, opts, dev):
    from torch_neuronx import _C
    if not opts.get("platform_target") and not kernel.platform_target and \
            not os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE"):
        opts = dict(opts, platform_target=_C._instance_name().split(".")[0])
    previous = _C._set_charging(False)
    try:
        cpu_args = [a.cpu() if _is_tensor(a) and a.device.type == "neuron" else a for a in args]
        cpu_kwargs = {k: (v.cpu() if _is_tensor(v) and v.device.type == "neuron" else v) for k, v in kwargs.items()}
        out = _on_cpu(kernel, cpu_args, cpu_kwargs, opts)
        for a, c in zip(args, cpu_args):          # kernels may write their HBM inputs in place
            if _is_tensor(a) and a.device.type == "neuron" and c is not a:
                a.copy_(c)
        out = _map(out, lambda t: t.to(dev) if _is_tensor(t) else t)
    finally:
        _C._set_charging(previous)
    rep = launch.last_report()
    if rep is not None and rep.total_ns is not None:
        _C._enqueue_timed(f"nki::{kernel.func.__name__}", dev.index or 0, int(round(rep.total_ns)))
    return out


def install():
    if hook not in launch.LAUNCH_HOOKS:
        launch.LAUNCH_HOOKS.append(hook)
