"""What a graph is, apart from how long it runs: the matmul FLOPs the model defines (for MFU)
and the eager baseline (the same ops launched one by one). Timing is the lowering's alone
(graph_cost.py)."""

from __future__ import annotations

import math

from .graph_spec import GraphSpec, Op, Value

_MATMUL = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "addbmm", "dot", "mv", "addmv"}
_CONV = {"convolution", "_convolution", "convolution_backward"}


def _numel(v: Value) -> int:
    return math.prod(v.shape) if v.shape else 1


def _matmul_flops(name: str, spec: GraphSpec, op: Op) -> float:
    if not op.outs:
        return 0.0
    out = spec.values[op.outs[0]]
    base = name.split("::", 1)[-1]
    if base in ("addmm", "baddbmm", "addbmm", "addmv"):
        a = spec.values[op.ins[1]] if len(op.ins) > 1 else None
    else:
        a = spec.values[op.ins[0]] if op.ins else None
    k = a.shape[-1] if a is not None and a.shape else 1
    return 2.0 * _numel(out) * k


def _conv_flops(name: str, spec: GraphSpec, op: Op) -> float:
    vals = [spec.values[i] for i in op.ins]
    if name.endswith("convolution_backward"):
        if len(vals) < 3:
            return 0.0
        grad_out, weight = vals[0], vals[2]
        per_out = _numel(weight) / max(weight.shape[0], 1)
        return 2 * 2.0 * _numel(grad_out) * per_out     # grad_input + grad_weight
    if len(vals) < 2 or not op.outs:
        return 0.0
    weight = vals[1]
    return 2.0 * _numel(spec.values[op.outs[0]]) * _numel(weight) / max(weight.shape[0], 1)


def _attention_flops(spec: GraphSpec, op: Op) -> float:
    q, k = spec.values[op.ins[0]], spec.values[op.ins[1]]
    b_h = math.prod(q.shape[:-2]) if len(q.shape) > 2 else 1
    passes = 2 if "backward" in op.name else 1
    return passes * 4.0 * b_h * q.shape[-2] * k.shape[-2] * q.shape[-1]


def model_flops(spec: GraphSpec, op: Op) -> float:
    """The matmul FLOPs of one op as the model defines them (2 per multiply-add; no padding,
    transposes or recomputation): what MFU counts."""
    base = op.name.split("::", 1)[-1].split(".")[0]
    if base in _MATMUL:
        return _matmul_flops(op.name, spec, op)
    if base in _CONV:
        return _conv_flops(op.name, spec, op)
    if (base.startswith("_scaled_dot_product") or base == "scaled_dot_product_attention") \
            and len(op.ins) > 1:
        return _attention_flops(spec, op)
    return 0.0


def graph_facts(spec: GraphSpec) -> dict:
    """ops (compute ops, views excluded; as many eager launches), eager_dma_bytes (each op
    reading and writing HBM on its own) and model_flops of `spec`."""
    ops = [op for op in spec.ops if not op.is_view]
    return {"ops": len(ops), "eager_launches": len(ops),
            "eager_dma_bytes": sum(spec.values[i].nbytes for op in ops for i in op.ins + op.outs),
            "model_flops": float(sum(model_flops(spec, op) for op in ops))}
