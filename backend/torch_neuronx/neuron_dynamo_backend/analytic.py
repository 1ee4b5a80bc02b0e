"""The interim analytic cost of a graph (used when neuron_sim.lower is absent) and the liveness
scan that reports SBUF spills for every graph.

Per-op engine work from the chip data (TensorE FLOPs at the dtype's peak, VectorE and ScalarE
element throughput), DMA only at graph boundaries and for spills, intermediates in SBUF while
the live set fits, one launch. Each op overlaps its own DMA; ops run one after another."""

from __future__ import annotations

import math

from .graph_spec import GraphCost, GraphSpec, Op, Target, Value

ENGINES = ("TensorE", "VectorE", "ScalarE", "DMA")

# ---- op families (ATen names without overload; views are in graph_spec._VIEW) ----------------

# Free: no data produced at run time.
_FREE = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "sym_size",
         "sym_stride", "sym_numel", "_assert_async", "_assert_scalar", "_local_scalar_dense"}
_MATMUL = {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "addbmm", "dot", "mv", "addmv"}
_CONV = {"convolution", "_convolution", "convolution_backward"}
# Transcendentals and activations run on ScalarE's lookup-table pipeline.
_SCALAR = {"exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sigmoid", "gelu", "silu",
           "erf", "erfc", "rsqrt", "sqrt", "sin", "cos", "softplus", "elu", "mish", "hardswish",
           "gelu_backward", "silu_backward", "tanh_backward", "sigmoid_backward", "pow",
           "reciprocal", "logit", "hardsigmoid", "leaky_relu_backward", "elu_backward"}
# (ScalarE passes, VectorE passes) over the op's input.
_SOFTMAX = {"_softmax": (1, 2), "_log_softmax": (1, 2), "_safe_softmax": (1, 2),
            "softmax": (1, 2), "_softmax_backward_data": (0, 3),
            "_log_softmax_backward_data": (1, 2)}
_NORM = {"native_layer_norm": (1, 3), "native_layer_norm_backward": (0, 5),
         "_fused_rms_norm": (1, 2), "_fused_rms_norm_backward": (0, 4),
         "native_batch_norm": (1, 3), "native_batch_norm_backward": (0, 5),
         "_native_batch_norm_legit_functional": (1, 3), "native_group_norm": (1, 3),
         "native_group_norm_backward": (0, 5)}
_REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "var_mean",
           "std", "std_mean", "prod", "logsumexp", "norm", "linalg_vector_norm", "nll_loss_forward",
           "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward", "any", "all",
           "cumsum", "cumprod", "topk", "sort"}
# Data-dependent addressing: indirect DMA (descriptor-generated) moves the rows.
_GATHER = {"embedding", "index_select", "gather", "index", "index_put", "_index_put_impl",
           "index_copy", "index_add", "scatter", "scatter_add", "scatter_reduce",
           "embedding_dense_backward", "masked_scatter", "take"}


def _width(dtype: str) -> str:
    return "16bit" if dtype in ("bfloat16", "float16", "int16", "uint16", "bool", "int8",
                                "uint8") or dtype.startswith("float8") else "32bit"


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


def _engine_work(spec: GraphSpec, op: Op, t: Target) -> dict:
    """Busy ns per engine for one op, and the indirect-DMA bytes it moves."""
    base = op.name.split("::", 1)[-1]
    work = {}
    outs = [spec.values[i] for i in op.outs]
    ins = [spec.values[i] for i in op.ins]
    out_elems = sum(_numel(v) for v in outs)
    first = (ins or outs)[0] if (ins or outs) else None
    width = _width(first.dtype) if first else "32bit"

    def vector(elems):
        work["VectorE"] = work.get("VectorE", 0.0) + 1e9 * elems / t.vector_elems_per_s[width]

    def scalar(elems):
        work["ScalarE"] = work.get("ScalarE", 0.0) + 1e9 * elems / t.scalar_elems_per_s[width]

    if base in _FREE:
        return work
    if base in _MATMUL or base in _CONV:
        dtype = ins[0].dtype if ins else "float32"
        peak = t.tensor_flops.get(dtype, t.tensor_flops["float32"])
        work["TensorE"] = 1e9 * model_flops(spec, op) / peak
        vector(out_elems)                   # PSUM -> SBUF evacuation (and bias add)
    elif base.startswith("_scaled_dot_product") or base == "scaled_dot_product_attention":
        q, k = ins[0], ins[1]
        b_h = math.prod(q.shape[:-2]) if len(q.shape) > 2 else 1
        passes = 2 if "backward" in base else 1
        peak = t.tensor_flops.get(q.dtype, t.tensor_flops["float32"])
        work["TensorE"] = 1e9 * _attention_flops(spec, op) / peak
        scalar(passes * b_h * q.shape[-2] * k.shape[-2])
        vector(passes * 2 * b_h * q.shape[-2] * k.shape[-2])
    elif base in _SOFTMAX or base in _NORM:
        s_passes, v_passes = _SOFTMAX.get(base) or _NORM[base]
        elems = _numel(ins[0]) if ins else out_elems
        scalar(s_passes * elems)
        vector(v_passes * elems)
    elif base in _SCALAR:
        scalar(out_elems)
    elif base in _REDUCE:
        vector(_numel(ins[0]) if ins else out_elems)
    elif base in _GATHER:
        work["DMA_bytes"] = float(sum(v.nbytes for v in outs))
    else:                                   # element-wise, copies, fills, where, cat, ...
        vector(out_elems)
    return work


def analyse(spec: GraphSpec, target: Target) -> GraphCost:
    """The interim analytic cost of `spec`, with the liveness scan (spills, SBUF peak)."""
    # Last use of each base buffer, for the SBUF live set.
    last_use = {}
    for pos, op in enumerate(spec.ops):
        for i in op.ins + op.outs:
            last_use[spec.values[i].base] = pos
    outputs = {spec.values[i].base for i in spec.outputs}
    busy = dict.fromkeys(ENGINES, 0.0)
    total = 0.0
    loaded = set()          # graph inputs already brought on chip
    live = {}               # base value -> bytes resident in SBUF
    dma_bytes = spill_bytes = spills = peak = ops = 0
    eager_dma = 0
    flops = 0.0
    custom_ns = 0.0
    for pos, op in enumerate(spec.ops):
        if op.is_view:
            continue
        ops += 1
        eager_dma += sum(spec.values[i].nbytes for i in op.ins + op.outs)
        work = _engine_work(spec, op, target)
        flops += model_flops(spec, op)
        op_dma = work.pop("DMA_bytes", 0.0)
        for i in op.ins:
            b = spec.values[i].base
            if spec.values[b].is_input and b not in loaded:
                loaded.add(b)
                op_dma += spec.values[b].nbytes
        for i in op.outs:
            v = spec.values[i]
            if v.base == i:
                live[i] = v.nbytes
                if i in outputs:
                    op_dma += v.nbytes   # written back to HBM once
        resident = sum(live.values())
        peak = max(peak, resident)
        if resident > target.sbuf_bytes:
            # Spill the oldest live buffers until the set fits: written out, read back later.
            for b in list(live):
                if resident <= target.sbuf_bytes:
                    break
                spilled = live.pop(b)
                resident -= spilled
                spills += 1
                spill_bytes += 2 * spilled
                op_dma += 2 * spilled
        for b in [b for b in live if last_use.get(b, -1) <= pos and b not in outputs]:
            del live[b]
        for b in [b for b in live if last_use.get(b, -1) <= pos and b in outputs]:
            del live[b]
        dma_ns = 1e9 * op_dma / target.hbm_bytes_per_s
        dma_bytes += int(op_dma)
        for engine, ns in work.items():
            busy[engine] += ns
        busy["DMA"] += dma_ns
        op_ns = max(sum(work.values()), dma_ns)   # an op's engines in sequence, DMA overlapped
        total += op_ns
        if op.name.split("::", 1)[0] not in ("aten", "prims"):
            custom_ns += op_ns
    # Graph outputs that no op produced (inputs returned as they are) cost nothing.
    return GraphCost(total_ns=int(round(total + target.launch_ns)),
                     launch_ns=int(round(target.launch_ns)),
                     engine_busy_ns={k: int(round(v)) for k, v in busy.items()},
                     dma_bytes=int(dma_bytes), spill_bytes=int(spill_bytes), spills=spills,
                     sbuf_peak_bytes=int(peak), ops=ops, eager_launches=ops,
                     eager_dma_bytes=int(eager_dma), custom_ops_ns=int(round(custom_ns)),
                     tensor_flops=flops, model_flops=flops)
