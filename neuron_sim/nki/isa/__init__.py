"""``nki.isa``: one function per NeuronCore instruction (NKI 0.3 signatures, ``dst`` first).

The instruction itself is its module in neuron_sim/isa (checks, cost, NumPy semantics). Each
function here adapts a call to it: (1) runs the core's checks (neuron_sim/isa/common.py, the
module's `build`), re-raising their errors with the kernel line, (2) computes the result with
the module's NumPy reference and rounds it to the destination dtype, unless the kernel is traced
for time only, and (3) records the module's ``build`` arguments for the program build. Every
registry instruction without a hand-written function here (core_barrier and sendrecv meet the
other program of an LNC=2 launch; activation_reduce) gets one from ``_generic.adapter``. The
files of this folder: neuron_sim/nki/README.md.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
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
    the shared HBM tensor they wrote: this core's barrier waits for its own writes to it, and its
    later reads and writes of it wait for the barrier, which waits for the other core's
    (timed: the core that arrives first idles, neuron_sim/isa/sync/core_barrier.py)."""
    ctx = _Ctx("core_barrier")
    ctx.core(module_for("core_barrier").build, ctx.chip)     # its rule: a chip with LNC=2
    reads = [data] if isinstance(data, NkiTensor) else []
    ctx.trace.emit("core_barrier", "sync", reads, [], {"data": reads[0] if reads else None},
                   ctx.loc)
    if ctx.trace.barrier is not None:
        _meet(ctx, None)


def _meet(ctx, what):
    """Wait for the other programs at this program's next meeting; what each brought. A program
    meeting another's different instruction, or none, is an error (on the hardware, a hang)."""
    tr = ctx.trace
    posts = tr.barrier.meet(tr, (ctx.op, what))
    if posts is None:
        ended = ", ".join(f"program {p[0]} after {n}" for p, n in sorted(tr.barrier.ended.items()))
        ctx.fail(f"meeting #{tr.meetings} ({ctx.op}) of program {tr.program_id[0]} is never met: "
                 f"the other programs returned ({ended} meetings); {_SAME_CALLS}")
    ops = {pid[0]: op for pid, (op, _) in posts.items()}
    if len(set(ops.values())) > 1:
        calls = ", ".join(f"{op} on core {c}" for c, op in sorted(ops.items()))
        ctx.fail(f"meeting #{tr.meetings} of the programs is {calls}: {_SAME_CALLS}")
    return {pid[0]: w for pid, (_, w) in posts.items()}


_SAME_CALLS = "each core_barrier and sendrecv needs the same call, in the same order, on both cores"


_sendrecv = adapter("sendrecv")     # the module's checks, cost and record


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id=None, dma_engine=dma_engine.dma,
             name=None):
    """The two cores of an LNC=2 launch exchange SBUF tiles: this core's ``src`` goes to the
    other's ``dst`` and the other's ``src`` comes into this core's ``dst`` (same shape and
    dtype); the k-th sendrecv of each core meet. ``pipe_id`` is taken and not modelled
    (neuron_sim/isa/dma/sendrecv.py)."""
    ctx = _Ctx("sendrecv")
    tr = ctx.trace
    if tr.barrier is None or tr.grid != (2,):
        ctx.fail(f"sendrecv exchanges tiles between the two cores of an LNC=2 launch; this "
                 f"launch runs {'x'.join(map(str, tr.grid))} program(s) on a logical core of "
                 "one NeuronCore: launch the kernel as kernel[2] on trn2/trn3, or copy the "
                 "tile with nisa.dma_copy")
    me = tr.program_id[0]
    for arg, rank in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if rank != 1 - me:
            ctx.fail(f"{arg}={rank!r} on core {me}: the cores of an LNC=2 pair exchange with "
                     f"each other, so core {me} sends to and receives from core {1 - me}")
    # a copy: the other program may read it after this one has written dst (src itself, in place)
    sent = np.array(ctx.read(src, "src"), copy=True) if isinstance(src, NkiTensor) else None
    _sendrecv(dst=dst, src=src, dma_engine=dma_engine)
    posts = _meet(ctx, ((list(src.shape), src.dtype), (list(dst.shape), dst.dtype), sent))
    bad = [f"core {c} sends src {_tile(posts[c][0])} to core {1 - c}'s dst "
           f"{_tile(posts[1 - c][1])}" for c in (0, 1) if posts[c][0] != posts[1 - c][1]]
    if bad:     # (the same words on both cores: either may be the one reported)
        ctx.fail(f"sendrecv at meeting #{tr.meetings} of the cores: {'; '.join(bad)}: each dst "
                 "must have the shape and dtype of the other core's src")
    if sent is not None:
        ctx.write(dst, module_for("sendrecv").reference(posts[1 - me][2]))


def _tile(shape_dtype) -> str:
    return f"{shape_dtype[0]} {dtypes.name_of(shape_dtype[1])}"


_activation_reduce = adapter("activation_reduce")     # the activation module, under this name


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """NKI's name for an activation whose row reduction is reset and read out."""
    _activation_reduce(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                       reduce_res=reduce_res, reduce_cmd=reduce_cmd.reset_reduce, name=name)


# every other instruction of the ISA registry: nisa.<name> made from its module
_generated = [n for n in instruction_names() if n not in globals() and module_for(n).NAME == n]
for _name in _generated:
    globals()[_name] = adapter(_name)


__all__ = _generated + [
    "activation_reduce", "core_barrier", "dge_mode", "dma_engine", "engine", "get_nc_version",
    "gpsimd_engine", "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd", "scalar_engine",
    "sendrecv", "tensor_engine", "unknown_engine", "vector_engine"]
