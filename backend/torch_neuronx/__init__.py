"""torch_neuronx for neuron-sim: registers the simulated Trainium device "neuron".

`import torch` loads this package through the `torch.backends` entry point (turn off with
TORCH_DEVICE_BACKEND_AUTOLOAD=0); `import torch_neuronx` works too. The instance simulated
comes from NEURON_SIM_INSTANCE (default trn2.3xlarge) or `set_instance()` before first use.
"""

from __future__ import annotations


def _autoload() -> None:
    """Entry point of the `torch.backends` group: importing this package is all it takes.

    Defined before `import torch`: when this package is imported first, torch's own import
    autoloads it again and finds this function on the partly initialised module."""


import atexit  # noqa: E402
import logging  # noqa: E402

import torch

from neuron_sim.hardware import list_instances  # noqa: F401  torch_neuronx.list_instances()

from . import _C
from . import settings
from .instance import resolve as _resolve
from .time_only import (TimeOnlyError, holds_values, is_time_only, set_moe_routing,  # noqa: F401
                        set_time_only, time_only)

__version__ = f"{torch.__version__.split('+')[0].rsplit('.', 1)[0]}.3.0+sim"

logger = logging.getLogger("torch_neuronx")
try:
    logger.setLevel(settings.get("TORCH_NEURONX_LOG_LEVEL"))
except settings.SettingError:
    pass    # reported with every other bad setting at first device use (_register)

_state = {}


def _visible():
    return _state["visible"]


def _use(visible):
    """From now on, time the configured runtime as `visible` with a new cost model."""
    from . import status
    from .cost import LoweredCostModel
    _state["visible"] = visible
    # Recording an event is one semaphore write on its queue.
    _C._set_event_record_ns(round(visible.instance.chip.cross_engine_semaphore_latency_s * 1e9))
    model = _state["cost_model"] = LoweredCostModel(visible)
    _C._set_cost_function(status.on_first_drain(model))    # neuron-ls/top see it from then on


def set_instance(name: str) -> None:
    """Simulate `name` (see `list_instances()`); call before the first tensor is on 'neuron'."""
    visible = _resolve(name)
    _C._configure(visible.device_count, visible.hbm_bytes_per_device, visible.instance.name,
                  settings.get("NEURON_RT_ENABLE_HOST_CC"))
    _use(visible)


def get_instance() -> str:
    return _visible().instance.name


def _register() -> None:
    if torch._C._get_privateuse1_backend_name() != "neuron":
        torch.utils.rename_privateuse1_backend("neuron")
    from . import neuron as device_module
    torch._register_device_module("neuron", device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    _C._register_direct_kernels()
    try:
        settings.validate()          # every declared setting, in one place
        set_instance(None)
    except (ValueError, RuntimeError) as e:
        # A bad environment must not break `import torch`: the device reports no cores and
        # its first use raises this message.
        import warnings
        _C._set_config_error(str(e))
        warnings.warn(f"neuron device unavailable: {e}", stacklevel=2)
    else:
        _C._set_fallback_only_for_unimplemented(
            settings.get("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS"))
        _C._set_launch_blocking(settings.get("NEURON_LAUNCH_BLOCKING"))
        if settings.get("NEURON_SIM_TIME_ONLY"):     # time-only for the whole process
            set_time_only(True)
        if settings.get("NEURON_SIM_CHECK_SEMANTICS"):   # eager ops against their lowerings
            from . import check_semantics
            check_semantics.install_if_set()
    from . import fallback, module_apply
    fallback.install()
    module_apply.install()          # shared buffers stay shared through .to("neuron")


_register()


def _flush_autograd_device_threads() -> None:
    """At exit, before the interpreter finalizes: make every neuron autograd thread finish.

    After backward() returns, the autograd thread of the device drops its graph task only at
    the end of its loop iteration. That frees Python objects the task captured (torch stashes a
    context object for every backward) and takes the GIL for it; when the script has ended by
    then, the interpreter is finalizing, the thread is ended inside a noexcept destructor and
    the process aborts (SIGABRT, rc 134; about 2 runs in 5 of a script ending in backward()).
    A tiny backward on each device used is queued behind that work and waited for with the GIL
    released, so the earlier task is gone when this returns; its own task captures no Python
    object (it runs without torch.autograd's stashed context, and its tensors, grad included,
    are kept until finalization), so dropping it late needs no GIL. torch 2.13 unstashes the
    context when backward() returns while the graph task keeps its copy, so whether the context
    is still stashed says nothing about whether a backward ran: every used device is flushed."""
    import time
    if not _C._is_initialized():
        return
    if torch._C._is_key_in_tls("context"):
        torch._C._remove_obj_from_tls("context")
    keep = _state.setdefault("exit_flush", [])
    owned = _C._owned_device()               # a torch.distributed rank uses only its own
    for d in ([owned] if owned >= 0 else range(_C._device_count())):
        if not max_memory_allocated(d):
            continue                         # never used: no autograd work on it
        try:
            x = torch.zeros((), device=f"neuron:{d}", requires_grad=True)
            y, grad = x * 1, torch.ones((), device=f"neuron:{d}")
            keep.append((x, y, grad))
            torch.autograd.Variable._execution_engine.run_backward(
                (y,), (grad,), False, False, (), True, True)
        except Exception:  # noqa: BLE001 - best effort: never replace the script's own exit
            continue
    time.sleep(0.02)     # and the GIL free a moment longer for any other thread still freeing


atexit.register(_flush_autograd_device_threads)

from .memory import (empty_cache, max_memory_allocated, max_memory_reserved,  # noqa: E402
                     memory_allocated, memory_reserved, memory_stats, memory_summary,
                     reset_accumulated_memory_stats, reset_peak_memory_stats)
from .streams import Event, Stream, current_stream, stream, synchronize  # noqa: E402,F401
from .nki_op import nki_op, wrap_nki  # noqa: E402,F401
from .neuron import is_initialized as is_neuron_runtime_initialized  # noqa: E402,F401


def get_fallback_ops() -> set[str]:
    """Names of the ops that fell back to CPU so far."""
    return set(_C._fallback_ops())


def _drained():
    """The cost model, once every op queued so far has been timed."""
    _C._drain()
    return _state["cost_model"]


def get_executed_ops() -> set[str]:
    """Names of the ops that ran as Neuron ops so far."""
    return set(_drained().executed) - get_fallback_ops()


def clear_op_tracking() -> None:
    _drained().executed.clear()
    _C._clear_fallback_ops()


def device_time_ns(device=None) -> int:
    """Simulated time of all work issued so far on `device` (latest stream clock)."""
    from .neuron import _index
    return _C._device_clock_ns(_index(device))


# ---- simulated-time reports (issue 5: lowered eager ops, AEE) ---------------------------------
def estimated_ops() -> dict:
    """{op name: count} of ops timed by the roofline estimate (no lowering rule) so far."""
    return dict(_drained().estimated)


def timing_breakdown() -> dict:
    """Simulated time so far, per op (count, ns, per-engine busy ns, HBM bytes, estimated),
    per engine, launches, AEE fusion counts and the program cache's hit rate / lowering time."""
    return _drained().breakdown()


def timing_report(top: int = 15) -> str:
    """`timing_breakdown()` as a printable table of the `top` ops by simulated time."""
    return _drained().report(top)


def reset_timing_stats() -> None:
    """Clear the breakdown counters (the program cache is kept)."""
    _drained().reset_stats()


def set_adaptive_eager(enabled) -> None:
    """Adaptive Eager Execution on/off (None: TORCH_NEURONX_ENABLE_CONCATENATION decides).
    `torch.use_deterministic_algorithms(True)` turns it off regardless."""
    _drained().aee_override = None if enabled is None else bool(enabled)


from . import distributed  # noqa: E402,F401  registers backend="neuron" with torch.distributed
from . import cuda_only_ops  # noqa: E402,F401  kernels for ops only CUDA has
from . import grouped_mm  # noqa: E402,F401  MoE grouped GEMM, sized by routing in time-only mode
from . import attention  # noqa: E402,F401  SDPA gradients: the layout compile is told
from . import device_interface as _device_interface  # noqa: E402
_device_interface.install()  # Dynamo's interface for 'neuron', once Dynamo is imported
