"""The simulated run time of one compiled graph: the single switch point between the backend
and the simulator's lowering.

`describe_graph(gm)` turns an ATen FX graph (from AOT Autograd) into a torch-free `GraphSpec`:
values with shapes and dtypes, ops in execution order, which values are graph inputs and
outputs. `cost_graph(spec, target)` turns that into a `GraphCost`: the simulated time of the
graph as ONE program, with the busy time of each engine, DMA bytes, spills and launches.

Which cost is used (`GraphCost.cost_source`):
  "neuron_sim.lower"  (default when neuron_sim.lower is importable) the graph's ops are lowered
      with `lower_sequence` into ONE ISA program (tensor identity from the FX graph, so an
      intermediate a later op reads stays in SBUF; only graph outputs are stored to HBM) and
      timed by `neuron_sim.simulate`. Ops with no lowering rule are timed by the lowering's
      roofline `estimate` and added in series (counted in `estimated_ops`).
  "interim-analytic"  (fallback) Per-op engine work from the chip data (TensorE FLOPs, VectorE
      and ScalarE element throughput), DMA only at graph boundaries and for spills, one launch.
      Each op overlaps its own DMA; ops run one after another (no cross-op pipelining).
Both add one program launch. `spills`, `sbuf_peak_bytes`, `eager_*` always come from the
backend's own liveness scan of the graph (`_analyse`).
"""

from __future__ import annotations

import logging
import math
import operator
from dataclasses import asdict, dataclass, field

import torch

from .errors import NEFFCompilationError

INTERIM = "interim-analytic"
LOWERED = "neuron_sim.lower"


def _lowering():
    """The neuron_sim.lower module, or None where it does not exist yet."""
    try:
        import neuron_sim.lower as lower
    except ImportError:
        return None
    return lower


logger = logging.getLogger("torch_neuronx.neuron_dynamo_backend")

COST_SOURCE = LOWERED if _lowering() is not None else INTERIM

# ---- op families (ATen names without overload) ------------------------------------------

# Views are access patterns over the same bytes: no engine work, no data movement.
_VIEW = {"view", "_unsafe_view", "reshape", "expand", "permute", "t", "transpose", "squeeze",
         "unsqueeze", "slice", "select", "alias", "as_strided", "detach", "split",
         "split_with_sizes", "unbind", "chunk", "unflatten", "flatten", "view_as", "narrow",
         "diagonal", "lift_fresh_copy", "_reshape_alias", "expand_as", "unfold",
         "view_as_real", "view_as_complex", "_unsafe_view_copy"}
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


# ---- the torch-free description of a graph ----------------------------------------------

@dataclass(frozen=True)
class Value:
    shape: tuple
    dtype: str          # torch dtype name without "torch."
    nbytes: int         # Trainium bytes: 64-bit types run in 32 bits
    base: int           # index of the value whose bytes this one views (itself if not a view)
    is_input: bool


@dataclass(frozen=True)
class Op:
    name: str           # "aten::mm"
    ins: tuple          # value indices of tensor inputs, in argument order
    outs: tuple         # value indices of tensor outputs
    is_view: bool


@dataclass
class GraphSpec:
    values: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    outputs: tuple = ()  # value indices written back to HBM


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _trainium_itemsize(dtype) -> int:
    return min(dtype.itemsize, 4)  # float64/int64 are computed and stored as 32-bit


def describe_graph(gm: torch.fx.GraphModule) -> GraphSpec:
    """Values and ops of an ATen FX graph whose nodes carry `meta["val"]` (AOT graphs do)."""
    spec = GraphSpec()
    index_of = {}   # (node, position) -> value index

    def add_value(t, base, is_input) -> int:
        shape = tuple(int(s) for s in t.shape)
        idx = len(spec.values)
        spec.values.append(Value(shape, _dtype_name(t.dtype),
                                 math.prod(shape) * _trainium_itemsize(t.dtype),
                                 idx if base is None else base, is_input))
        return idx

    def tensors_of(val):
        if isinstance(val, torch.Tensor):
            return [(0, val)]
        if isinstance(val, (tuple, list)):
            return [(i, v) for i, v in enumerate(val) if isinstance(v, torch.Tensor)]
        return []

    def input_indices(node):
        found = []

        def visit(a):
            if isinstance(a, torch.fx.Node) and (a, 0) in index_of:
                found.append(index_of[(a, 0)])
            elif isinstance(a, (tuple, list)):
                for e in a:
                    visit(e)
        visit(node.args)
        visit(tuple(node.kwargs.values()))
        return tuple(found)

    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder":
            if isinstance(val, torch.Tensor):
                index_of[(node, 0)] = add_value(val, None, True)
        elif node.op == "call_function":
            if node.target is operator.getitem:
                src, pos = node.args
                if (src, pos) in index_of:
                    index_of[(node, 0)] = index_of[(src, pos)]
                continue
            if not isinstance(node.target, torch._ops.OpOverload):
                continue  # symbolic-size arithmetic and the like: host side
            name = node.target._schema.name
            base_name = name.split("::", 1)[-1]
            ins = input_indices(node)
            is_view = base_name in _VIEW
            outs = []
            for pos, t in tensors_of(val):
                base = spec.values[ins[0]].base if (is_view and ins) else None
                idx = add_value(t, base, False)
                index_of[(node, pos)] = idx
                outs.append(idx)
            spec.ops.append(Op(name, ins, tuple(outs), is_view))
        elif node.op == "output":
            outs = []

            def visit(a):
                if isinstance(a, torch.fx.Node) and (a, 0) in index_of:
                    outs.append(index_of[(a, 0)])
                elif isinstance(a, (tuple, list)):
                    for e in a:
                        visit(e)
            visit(node.args)
            spec.outputs = tuple(outs)
    return spec


def _launch_s(chip: str) -> float:
    """One program launch: the same per-NEFF start cost eager ops pay (one assumption, kept
    with the eager cost model)."""
    try:
        from neuron_sim.lower import EAGER_LAUNCH_S
    except ImportError:                      # before neuron_sim.lower existed
        from ..cost import EAGER_OP_LAUNCH_S as EAGER_LAUNCH_S
    return EAGER_LAUNCH_S[chip]


# ---- the target ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """Rates of one logical NeuronCore of the simulated instance (all from the chip data)."""
    chip: str
    instance: str
    lnc: int
    hbm_bytes_per_s: float
    sbuf_bytes: int
    launch_ns: float
    tensor_flops: dict          # dtype name -> FLOP/s
    vector_elems_per_s: dict    # "16bit" / "32bit" -> elements/s
    scalar_elems_per_s: dict

    @classmethod
    def of(cls, visible) -> "Target":
        inst, lnc = visible.instance, visible.lnc
        chip = inst.chip
        flops = {d: inst.peak_flops_per_logical_core(d, lnc)
                 for d in ("float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2")}
        return cls(chip=chip.name, instance=inst.name, lnc=lnc,
                   hbm_bytes_per_s=inst.hbm_bytes_per_s_per_logical_core(lnc),
                   sbuf_bytes=chip.sbuf_partitions * chip.sbuf_usable_bytes_per_partition * lnc,
                   launch_ns=1e9 * _launch_s(chip.name),
                   tensor_flops=flops,
                   vector_elems_per_s={
                       "16bit": chip.vector_elems_per_cycle_16bit * chip.vector_clock_hz * lnc,
                       "32bit": chip.vector_elems_per_cycle_32bit * chip.vector_clock_hz * lnc},
                   scalar_elems_per_s={
                       "16bit": chip.scalar_elems_per_cycle_16bit * chip.scalar_clock_hz * lnc,
                       "32bit": chip.scalar_elems_per_cycle_32bit * chip.scalar_clock_hz * lnc})

    def key(self) -> str:
        return f"{self.instance}/lnc{self.lnc}"


# ---- the cost -----------------------------------------------------------------------------

ENGINES = ("TensorE", "VectorE", "ScalarE", "DMA")


@dataclass
class GraphCost:
    total_ns: int                  # one launch of the whole graph, as charged to the stream
    launch_ns: int
    engine_busy_ns: dict           # engine -> busy ns inside the program
    dma_bytes: int                 # HBM traffic: graph inputs, outputs and spills
    spill_bytes: int               # intermediates that did not fit in SBUF (written + re-read)
    spills: int                    # how many intermediates spilled
    sbuf_peak_bytes: int           # largest live set of intermediates
    ops: int                       # compute ops (views excluded)
    # The same ops run one by one in eager mode, for the explanation (not charged):
    eager_launches: int
    eager_dma_bytes: int
    cost_source: str = INTERIM
    estimated_ops: list = field(default_factory=list)   # timed by roofline, not lowered

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "GraphCost":
        out = cls(**data)
        if not isinstance(out.total_ns, int) or out.total_ns < 0:
            raise ValueError(f"total_ns must be a non-negative int, got {out.total_ns!r}")
        return out


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
        flops = (_matmul_flops if base in _MATMUL else _conv_flops)(op.name, spec, op)
        dtype = ins[0].dtype if ins else "float32"
        peak = t.tensor_flops.get(dtype, t.tensor_flops["float32"])
        work["TensorE"] = 1e9 * flops / peak
        vector(out_elems)                   # PSUM -> SBUF evacuation (and bias add)
    elif base.startswith("_scaled_dot_product") or base == "scaled_dot_product_attention":
        q, k = ins[0], ins[1]
        b_h = math.prod(q.shape[:-2]) if len(q.shape) > 2 else 1
        l_len, s_len, e = q.shape[-2], k.shape[-2], q.shape[-1]
        passes = 2 if "backward" in base else 1
        peak = t.tensor_flops.get(q.dtype, t.tensor_flops["float32"])
        work["TensorE"] = passes * 1e9 * 4.0 * b_h * l_len * s_len * e / peak
        scalar(passes * b_h * l_len * s_len)
        vector(passes * 2 * b_h * l_len * s_len)
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


def _no_lowering() -> frozenset:
    """ATen ops the simulated compiler cannot lower: those eager mode runs on CPU."""
    from ..fallback import DATA_DEPENDENT_SHAPE, NO_NEURON_KERNEL
    return frozenset(n.split(".")[0] for n in DATA_DEPENDENT_SHAPE + NO_NEURON_KERNEL)


_NO_LOWERING = _no_lowering()


def _check_lowerable(spec: GraphSpec) -> None:
    unsupported = sorted({op.name for op in spec.ops if op.name.split(".")[0] in _NO_LOWERING})
    if unsupported:
        raise NEFFCompilationError(
            f"the graph uses {', '.join(unsupported)}, which has no Neuron lowering (in eager "
            "mode it runs on CPU). Move it out of the compiled region, or set "
            "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 (or options={'fallback_execution': "
            "True}) to run this graph eagerly.")


def _analyse(spec: GraphSpec, target: Target) -> GraphCost:
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
    for pos, op in enumerate(spec.ops):
        if op.is_view:
            continue
        ops += 1
        eager_dma += sum(spec.values[i].nbytes for i in op.ins + op.outs)
        work = _engine_work(spec, op, target)
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
        total += max(sum(work.values()), dma_ns)   # an op's engines in sequence, DMA overlapped
    # Graph outputs that no op produced (inputs returned as they are) cost nothing.
    return GraphCost(total_ns=int(round(total + target.launch_ns)),
                     launch_ns=int(round(target.launch_ns)),
                     engine_busy_ns={k: int(round(v)) for k, v in busy.items()},
                     dma_bytes=int(dma_bytes), spill_bytes=int(spill_bytes), spills=spills,
                     sbuf_peak_bytes=int(peak), ops=ops, eager_launches=ops,
                     eager_dma_bytes=int(eager_dma))


# ---- the lowered cost (neuron_sim.lower) -----------------------------------------------------

_program_cache = {}    # ("op", key, chip, lnc) -> Timing, shared by every graph of the process


def _convert(a, lower):
    """An FX argument as the lowering sees it: tensors as TensorSpec with the graph's ids."""
    if isinstance(a, torch.fx.Node):
        val = a.meta.get("val")
        if isinstance(val, torch.Tensor):
            return lower.TensorSpec(tuple(int(x) for x in val.shape), _dtype_name(val.dtype),
                                    tuple(int(x) for x in val.stride()), id=_node_id(a),
                                    on_device=val.device.type != "cpu" or val.dim() > 0)
        if isinstance(val, (torch.SymInt, int, float, bool)):
            return int(val) if isinstance(val, torch.SymInt) else val
        return None
    if isinstance(a, (list, tuple)):
        return type(a)(_convert(x, lower) for x in a)
    if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(a).replace("torch.", "")
    return a


def _node_id(node: torch.fx.Node):
    if node.target is operator.getitem:
        src, pos = node.args
        return (src.name, pos)
    return (node.name, 0)


def lowering_ops(gm: torch.fx.GraphModule, lower) -> tuple:
    """(OpSpecs in execution order, ids of the graph outputs)."""
    ops = []
    live = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            val = node.meta.get("val")
            vals = [val] if isinstance(val, torch.Tensor) else (
                list(val) if isinstance(val, (tuple, list)) else [])
            outs = tuple(lower.TensorSpec(tuple(int(x) for x in v.shape), _dtype_name(v.dtype),
                                          tuple(int(x) for x in v.stride()),
                                          id=(node.name, i))
                         for i, v in enumerate(vals) if isinstance(v, torch.Tensor))
            ops.append(lower.OpSpec(node.target.name(),
                                    tuple(_convert(a, lower) for a in node.args), outs,
                                    {k: _convert(v, lower) for k, v in node.kwargs.items()}))
        elif node.op == "output":
            torch.fx.node.map_arg(node.args, lambda n: live.add(_node_id(n)))
    return ops, live


def _standalone(op, lower, chip, lnc):
    """Timing of one op alone, or None when it has no rule (or its rule rejects the shapes)."""
    key = ("op", op.key(), chip, lnc)
    if key not in _program_cache:
        t = None
        if lower.has_rule(op.name):
            try:
                t = lower.lower_op(op, chip, lnc)
            except Exception as e:  # noqa: BLE001  a lowering gap must not fail the user's compile
                logger.info("neuron_sim.lower could not lower %s (%s: %s); timing it by "
                            "roofline.", op.name, type(e).__name__, e)
                t = None
        _program_cache[key] = t
    return _program_cache[key]


def _lowered(gm, spec: GraphSpec, target: Target, lower) -> GraphCost:
    analysis = _analyse(spec, target)
    ops, live = lowering_ops(gm, lower)
    fused, alone, serial = [], [], []
    for op in ops:
        t = _standalone(op, lower, target.chip, target.lnc)
        if t is None:
            est = lower.estimate(op, target.chip, target.lnc)
            est.estimated = True
            serial.append((op.name, est))
        else:
            fused.append(op)
            alone.append(t)
    note = ""
    try:
        program = lower.lower_sequence(fused, target.chip, target.lnc, live_outputs=live,
                                       standalone=alone) if fused else None
    except Exception as e:  # noqa: BLE001  the fused program failed: time the ops one by one
        program, note = None, f" (unfused: {type(e).__name__}: {e})"
        serial.extend((op.name, t) for op, t in zip(fused, alone))
    engines = dict.fromkeys(lower.ENGINES, 0.0)
    total, hbm = 0.0, 0.0
    for t in ([program] if program is not None else []) + [t for _n, t in serial]:
        total += t.total_ns
        hbm += t.hbm_bytes
        for e, v in t.engine_ns.items():
            engines[e] = engines.get(e, 0.0) + v
    analysis.total_ns = int(round(total + target.launch_ns))
    analysis.engine_busy_ns = {e: int(round(v)) for e, v in engines.items()}
    analysis.dma_bytes = int(hbm)
    analysis.cost_source = LOWERED + note
    analysis.estimated_ops = sorted({n for n, t in serial if getattr(t, "estimated", False)})
    return analysis


def cost_graph(gm: torch.fx.GraphModule, target: Target) -> GraphCost:
    """Simulated time of the ATen graph `gm` as ONE program on one logical core of `target`.
    Raises NEFFCompilationError for graphs the simulated compiler cannot lower."""
    spec = describe_graph(gm)
    _check_lowerable(spec)
    lower = _lowering()
    if lower is None:
        return _analyse(spec, target)
    return _lowered(gm, spec, target, lower)
