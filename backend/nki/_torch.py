"""Kernels called with torch tensors (how each kind runs: README.md): CPU tensors, ``neuron``
tensors (run on CPU copies, the simulated time charged to the current stream as ``nki::<kernel>``)
and fake/meta tensors (traced for shapes only). A ``neuron`` call targets the simulated
instance's chip unless NEURON_PLATFORM_TARGET_OVERRIDE or ``platform_target=`` says otherwise.
Imported lazily: ``nki`` with NumPy inputs never imports torch.
"""

from __future__ import annotations

from neuron_sim.nki import launch, settings
from neuron_sim.nki.errors import NkiLaunchError


def _torch_dtype(np_dtype, widen: dict):
    import torch
    dtype = getattr(torch, str(np_dtype), torch.float32)
    return widen.get(dtype, dtype)


def _is_tensor(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "device") and hasattr(x, "detach")


def _is_fake(x):
    from torch._subclasses.fake_tensor import FakeTensor    # in every torch the package takes
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
    dev = _common_device(kernel, args, kwargs)
    if dev is None:
        return _on_cpu(kernel, args, kwargs, opts)
    return _on_device(kernel, args, kwargs, opts, dev)


def _common_device(kernel, args, kwargs):
    """The one neuron device of the tensor arguments (None: all on CPU). A kernel runs on one
    NeuronCore and reads its HBM: tensors on CPU or another core are an error, as a CUDA kernel
    launch with tensors on two devices is."""
    import torch
    named = ([(f"argument {i}", a) for i, a in enumerate(args)]
             + [(repr(k), v) for k, v in kwargs.items()])
    devices = {}        # argument name -> device, a neuron device with its index
    for name, t in named:
        if _is_tensor(t):
            d = t.device
            if d.type == "neuron" and d.index is None:
                d = torch.device("neuron", torch.neuron.current_device())
            devices[name] = d
    first = next((d for d in devices.values() if d.type == "neuron"), None)
    if first is None:
        return None
    for name, d in devices.items():
        if d != first:
            raise NkiLaunchError(
                f"kernel {kernel.func.__name__!r}: {name} is on {d} but other tensor arguments are "
                f"on {first}; an NKI kernel reads the HBM of one NeuronCore. Move every tensor "
                f"argument to {first} (tensor.to('{first}')) before the call.")
    return first


def _to_numpy(t):
    """CPU torch tensor -> NumPy sharing memory (bf16 through its int16 bits: NumPy has no bf16)."""
    import torch
    t = t.detach()
    if t.dtype == torch.bfloat16:
        from neuron_sim.nki import dtypes
        return t.contiguous().view(torch.int16).numpy().view(dtypes.bfloat16)
    return t.contiguous().numpy()       # the tensor itself when it is contiguous


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
    np_args, np_kwargs = [conv(a) for a in args], {k: conv(v) for k, v in kwargs.items()}
    out = launch.run(kernel, np_args, np_kwargs, **opts)
    import torch
    inputs = [*args, *kwargs.values()]
    with torch.no_grad():   # contiguous tensors shared memory with their arrays already
        for a, n in zip(inputs, [*np_args, *np_kwargs.values()]):
            if _is_tensor(a) and not a.is_contiguous() and not _same_bits(a, _from_numpy(n)):
                a.copy_(_from_numpy(n))
    widen = _widened_dtypes(inputs)
    return _map(out, lambda x: _widen(_from_numpy(x), widen) if isinstance(x, np.ndarray) else x)


def _widened_dtypes(inputs) -> dict:
    """{32-bit dtype: 64-bit dtype} for the 64-bit kinds the caller passed. Trainium computes
    float64/int64 in 32 bits, so a kernel declaring its output with its input's dtype gets the
    32-bit one; the caller gets its own dtype back (values as computed in 32 bits). Only when
    the caller passed no tensor of the 32-bit dtype itself: then the kernel's choice is kept."""
    import torch
    dtypes = {t.dtype for t in inputs if _is_tensor(t)}
    pairs = ((torch.float32, torch.float64), (torch.int32, torch.int64))
    return {narrow: wide for narrow, wide in pairs if wide in dtypes and narrow not in dtypes}


def _widen(t, widen: dict):
    wide = widen.get(t.dtype, t.dtype)
    return t.to(wide) if wide != t.dtype else t


def _fake(kernel, args, kwargs, opts, tensors):
    import numpy as np
    import torch
    from neuron_sim.nki import dtypes
    like = tensors[0]

    def shape_only(a):
        if _is_tensor(a):
            dt = dtypes.normalize(str(a.dtype).replace("torch.", ""))
            return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=dt), shape=tuple(a.shape),
                                                   strides=(0,) * a.dim())
        return a

    o = dict(opts, numerics=False, timing=False)
    out = launch.run(kernel, [shape_only(a) for a in args],
                     {k: shape_only(v) for k, v in kwargs.items()}, **o)
    widen = _widened_dtypes(tensors)
    return _map(out, lambda a: torch.empty(a.shape, dtype=_torch_dtype(a.dtype, widen),
                                           device=like.device)
                if isinstance(a, np.ndarray) else a)


def _on_device(kernel, args, kwargs, opts, dev):
    """The kernel runs against CPU copies of the neuron tensors (uncharged); a neuron tensor gets
    the copy back only when the kernel changed it (bit-wise), so inputs a kernel only reads keep
    their autograd version and requires-grad leaves can be passed."""
    import torch
    from torch_neuronx import _C
    if not opts.get("platform_target") and not kernel.platform_target and \
            not settings.get("NEURON_PLATFORM_TARGET_OVERRIDE"):
        opts = dict(opts, platform_target=_C._instance_name().split(".")[0])
    on_device = lambda a: _is_tensor(a) and a.device.type == "neuron"          # noqa: E731
    previous = _C._set_charging(False)
    try:
        cpu = lambda a: a.detach().cpu() if on_device(a) else a                  # noqa: E731
        cpu_args, cpu_kwargs = [cpu(a) for a in args], {k: cpu(v) for k, v in kwargs.items()}
        pairs = zip([*args, *kwargs.values()], [*cpu_args, *cpu_kwargs.values()])
        copies = [(a, c, c.clone()) for a, c in pairs if on_device(a)]
        out = _on_cpu(kernel, cpu_args, cpu_kwargs, opts)
        with torch.no_grad():       # the kernel wrote device memory, as hardware does
            for a, c, before in copies:
                if not _same_bits(before, c):
                    a.copy_(c)
        out = _map(out, lambda t: t.to(dev) if _is_tensor(t) else t)
    finally:
        _C._set_charging(previous)
    rep = launch.last_report()
    if rep is not None and rep.total_ns is not None:
        _C._enqueue_timed(f"nki::{kernel.func.__name__}", dev.index, int(round(rep.total_ns)))
    return out


def _same_bits(a, b) -> bool:
    """Equal bit patterns (NaN payloads and -0.0 included): a kernel that wrote anything different
    wrote the tensor."""
    import torch
    if a.numel() == 0:
        return True
    def raw(t):
        return t.contiguous().reshape(-1).view(torch.uint8)
    return torch.equal(raw(a), raw(b))


def install():
    if hook not in launch.LAUNCH_HOOKS:
        launch.LAUNCH_HOOKS.append(hook)
