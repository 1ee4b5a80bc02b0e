"""``nki.isa``: one function per NeuronCore instruction (NKI 0.3 signatures, ``dst`` first).

The instruction itself is its module in neuron_sim/isa (checks, cost, NumPy semantics). Each
function here adapts a call to it: (1) runs the core's checks (neuron_sim/isa/common.py, the
module's `build`), re-raising their errors with the kernel line, (2) computes the result with
the module's NumPy reference and rounds it to the destination dtype, unless the kernel is traced
for time only, and (3) records the module's ``build`` arguments for the program build. Every
registry instruction without a hand-written function here gets one from ``_generic.adapter``.

    enums.py          engine, reduce_cmd, dge_mode, oob_mode, matmul_perf_mode, nc_version,
                      dma_engine
    _common.py        per-call context (the core's rules, raised at the kernel line), reading and
                      writing kernel tensors
    _generic.py       nisa.<instr> made from an ISA module alone: every instruction not listed
                      below (nc_matmul, activation, tensor_tensor, tensor_reduce, dma_copy, ...)
    (here)            core_barrier, activation_reduce (activation with its reduction reset)
"""

from __future__ import annotations

from ..tensor import NkiTensor
from ..tracer import current
from ...isa import instruction_names, module_for
from ._common import _Ctx
from ._generic import adapter
from .enums import (dge_mode, dma_engine, engine, gpsimd_engine, matmul_perf_mode, nc_version,
                    oob_mode, reduce_cmd, scalar_engine, tensor_engine, unknown_engine,
                    vector_engine)


# ---- instructions ----------------------------------------------------------------------------
def get_nc_version():
    return nc_version(current().target.neuroncore_version)


def core_barrier(data, cores=None, engine=engine.unknown, name=None):
    """Both programs of an LNC=2 launch wait here until the other arrives (NC-v3+). ``data`` is
    the shared HBM tensor they wrote; this core's barrier waits for its own writes to it. The
    timing model runs each core's program separately, so the wait for the *other* core is not
    timed (a known gap)."""
    ctx = _Ctx("core_barrier")
    ctx.core(module_for("core_barrier").build, ctx.chip)     # its rule: a chip with LNC=2
    reads = [data] if isinstance(data, NkiTensor) else []
    ctx.trace.emit("core_barrier", "sync", reads, [], {"data": reads[0] if reads else None},
                   ctx.loc)
    if ctx.trace.barrier is not None:
        ctx.trace.barrier.wait()


_activation_reduce = adapter("activation_reduce")     # the activation module, under this name


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """NKI's name for an activation whose row reduction is reset and read out."""
    _activation_reduce(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                       reduce_res=reduce_res, reduce_cmd=reduce_cmd.reset_reduce, name=name)


# every other instruction of the ISA registry: nisa.<name> made from its module
_generated = [n for n in instruction_names() if n not in globals() and module_for(n).NAME == n]
for _name in _generated:
    globals()[_name] = adapter(_name)


def sendrecv(*args, **kwargs):
    ctx = _Ctx("sendrecv")
    ctx.fail("sendrecv between the two cores of an LNC=2 launch is not simulated yet")


__all__ = _generated + [
    "activation_reduce", "core_barrier", "dge_mode", "dma_engine", "engine", "get_nc_version",
    "gpsimd_engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd", "scalar_engine",
    "sendrecv", "tensor_engine", "unknown_engine", "vector_engine"]
