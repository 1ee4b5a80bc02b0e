"""The plans a rule reads operands from SBUF in, other than the flat plan, declared next to the
rule (`@lowers(..., reads=reads.ROWS)`). api.sequence_ctx asks the rules of a fused sequence
how they read each intermediate a later op reads, and the resident copy is laid out for those
readers, as a compiler lays out an intermediate. Each function: (op, chip, later keys) ->
{key: [p, cols]} of the inputs in `later` it reads that way; flat-plan readers are left out
(every resident copy serves the flat plan)."""

from __future__ import annotations

from math import ceil

from .broadcast import plan
from .context import LowerCtx, row_shape
from .spec import OpSpec, TensorSpec

_key = LowerCtx.key


def _k_major(t: TensorSpec, K: int, P: int, batched: bool) -> tuple:
    """[p, cols] a matmul reads matrix operand t in, K on partitions: K tile k of a batch at
    free offset (batch start + k * P * other) / P, `other` its other dim, as
    matmul._load_k_major reads a resident operand (`batched`: leading dims are batches, not
    rows as linear's x has them)."""
    per_batch = t.shape[-2] * t.shape[-1] if batched and t.ndim > 1 else t.numel
    other = max(1, per_batch // max(K, 1))
    return min(P, K), (t.numel - per_batch) // P + ceil(K / P) * other


def ROWS(op: OpSpec, chip, later) -> dict:
    """Rows of the last dim whole, over the partitions (norm.row_blocks)."""
    return {_key(t): row_shape(t, chip.sbuf_partitions) for t in op._inputs
            if t.ndim > 1 and _key(t) in later}


def k_major(first: int, batched: bool = True):
    """The two matrix operands from input `first` on, K-major (matmul._load_k_major)."""
    def reads(op: OpSpec, chip, later) -> dict:
        operands = op._inputs[first:first + 2]
        K = operands[0].shape[-1] if operands and operands[0].ndim else 1
        return {_key(t): _k_major(t, K, chip.sbuf_partitions, batched)
                for t in operands if _key(t) in later}
    return reads


def HEADS(op: OpSpec, chip, later) -> dict:
    """Attention's [B, H, S, D] operands, K-major per head (attention._km)."""
    return {_key(t): _k_major(t, t.shape[-1], chip.sbuf_partitions, True)
            for t in op._inputs if t.ndim == 4 and _key(t) in later}


_BROADCAST_PLANS: dict = {}     # (chip, layouts) -> the broadcast plan's [p, cols] (or None)


def BROADCAST(op: OpSpec, chip, later) -> dict:
    """An element-wise op's full-size operands in its broadcast plan when another operand is
    smaller (rules.elementwise.elementwise, broadcast.plan)."""
    if not op.outputs:
        return {}
    out = op.outputs[0]
    ins = [t for t in op._inputs if t.numel > 0]
    full = [t for t in ins if t.numel == out.numel]
    read = [_key(t) for t in full if _key(t) in later]
    if not read or len(full) == len(ins):
        return {}
    at = (chip.name, out.layout_key) + tuple(t.layout_key for t in ins)
    shape = _BROADCAST_PLANS.get(at, False)
    if shape is False:
        how = plan(out, ins, chip)[0]
        if len(_BROADCAST_PLANS) > 4096:
            _BROADCAST_PLANS.clear()
        shape = _BROADCAST_PLANS[at] = None if how is None else (how.p, how.cols)
    return {} if shape is None else dict.fromkeys(read, shape)
