"""Run lowered programs through the ISA modules' NumPy semantics (issue 12's debug mode: the
slow version is the specification).

    outs = run_lowered(op, [x, y])        # one array per device input, in op.inputs order
    outs = run_lowered_sequence(ops, {"x": x, "w": w}, live_outputs={"y"})   # {id: array}

build the program IN FULL (every block, `LowerCtx(full=True)`; LNC 1), place the inputs in the
HBM tensors the lowering made for them, run `neuron_sim.interpreter.execute` and read the
outputs back. A sequence is the ONE program `api.lower_sequence` builds (a compiled graph, an
AEE group): its intermediates stay resident in SBUF and the dead ones are never stored, so
those hand-offs run too; `run_lowered` is its one-op case. `check_lowered` and
`check_lowered_sequence` compare the outputs with values computed elsewhere (an eager op's CPU
result, a compiled graph's node values: torch_neuronx.check_semantics) and name the op that
went wrong.

The lowering addresses HBM chunk-major ([chunk, p, f], `LowerCtx.hbm_pieces`): a permutation of
the row-major elements that every tensor of the flat plan shares, so an element-wise op is exact
element for element, and a row op keeps whole rows together. Programs that are timing-equivalent
only are refused with `Uncheckable`, naming the op and why (`why_unchecked`): `EXACT` lists, by
rule, the ops whose programs compute the op (tests/lower/test_lowered_semantics.py runs each
against torch), under the conditions `why_unchecked` checks; `TIMING_ONLY` says for each other
rule what its program leaves out. A sequence is also refused when an op reads a value the
program never writes (a view of an intermediate, a foreach list written member by member)."""

from __future__ import annotations

from math import prod

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..hardware import get_chip
from ..interpreter import execute
from ..numerics.formats import itemsize, np_dtype
from .broadcast import STAND_IN, plan
from .context import LowerCtx
from .registry import LoweringError, rule_for
from .rules.elementwise import COPY_OPS, number
from .rules.matmul import addmm_scales
from .rules.norm import BACKWARD_ARGS, _reduce_dims, backward_row_max, group_rows, leading_prefix
from .rules.optimizer import STEPS_ARG, list_identity
from .spec import OpSpec, TensorSpec, tensor_list


class Uncheckable(LoweringError):
    """The op's lowering is timing-equivalent only: its program's values are not the op's."""


def _aten(names: str, suffix: str = "", prefix: str = "") -> set:
    return {f"aten::{prefix}{n}{suffix}" for n in names.split()}


# rule (function name) -> the ops of it whose lowered programs compute the op
EXACT = {
    "unary_activation": _aten("exp log tanh sigmoid relu gelu silu mish softplus erf sqrt rsqrt "
                              "reciprocal sin atan sign abs square cos tan exp2 sgn hardtanh "
                              "relu6 leaky_relu"),
    "unary_vector": _aten("clamp_min clamp_max pow clamp clip neg positive logical_not frac "
                          "isposinf isneginf isinf isfinite"),
    "binary": _aten("add sub mul div true_divide maximum minimum eq ne lt le gt ge fmod "
                    "remainder logical_and logical_or logical_xor rsub masked_fill"),
    "ternary": _aten("addcmul addcdiv lerp where _masked_scale"),
    "activation_backward": _aten("gelu silu softplus sigmoid tanh threshold hardtanh "
                                 "hardsigmoid leaky_relu", suffix="_backward"),
    "pointwise_loss": _aten("mse_loss l1_loss smooth_l1_loss huber_loss"),
    "pointwise_loss_backward": _aten("mse_loss_backward"),
    "copy_like": set(COPY_OPS),
    "copy_d2d": {"neuron::copy_d2d"},
    "fill": _aten("fill zero zeros_like zeros new_zeros"),
    "reduction": _aten("sum mean amax amin argmax argmin max min var std var_mean std_mean norm "
                       "linalg_vector_norm logsumexp prod all any count_nonzero"),
    "softmax": _aten("_softmax softmax _safe_softmax _log_softmax log_softmax "
                     "_softmax_backward_data _log_softmax_backward_data"),
    "layer_norm": _aten("native_layer_norm layer_norm rms_norm _fused_rms_norm"),
    "layer_norm_backward": _aten("native_layer_norm_backward _fused_rms_norm_backward"),
    "group_norm": _aten("native_group_norm group_norm"),
    "batch_norm": _aten("native_batch_norm _native_batch_norm_legit batch_norm "
                        "_native_batch_norm_legit_no_training _batch_norm_with_update "
                        "_native_batch_norm_legit_functional _batch_norm_no_update"),
    "batch_norm_backward": _aten("native_batch_norm_backward batch_norm_backward"),
    "mm": _aten("mm bmm mv dot"),
    "addmm": _aten("addmm baddbmm addbmm"),
    "linear": _aten("linear"),
    "cat": _aten("cat concat concatenate stack"),
    "foreach": _aten("add sub mul div maximum minimum clamp_min clamp_max sqrt exp log "
                     "reciprocal sigmoid abs sign copy zero", prefix="_foreach_"),
    "gather": _aten("embedding index_select gather"),
    "scatter": _aten("embedding_dense_backward index_add index_put"),
    "nll_loss": _aten("nll_loss_forward nll_loss nll_loss2d_forward"),
    "nll_loss_backward": _aten("nll_loss_backward nll_loss2d_backward"),
    "foreach_norm": _aten("_foreach_norm"),
    "fused_optimizer": _aten("_fused_adam _fused_adamw _fused_sgd _fused_adagrad"),
}
# rule -> what its program leaves out (why the values are not the op's)
TIMING_ONLY = {
    "unary_activation": "ScalarE has no table for it: it is charged as another activation of "
                        "the same cost (elementwise._ACT_FUNCS)",
    "unary_vector": "it is charged as one tensor_scalar of the same cost with another ALU op "
                    "or immediate (elementwise._VEC_UNARY)",
    "binary": "it is charged as one tensor_tensor of the same cost with a stand-in ALU op "
              "(elementwise._BINARY)",
    "ternary": "addr and masked_scatter: the recipe is their instruction count (multiply, "
               "add), not their formula",
    "activation_backward": "mish, hardswish and logit: f' is charged as one activation of the "
                           "same cost (ScalarE has no derivative table for them)",
    "random": "random bits are charged as a GpSimd iota (no rng instruction in the builder)",
    "dropout": "random bits are charged as a GpSimd iota (no rng instruction in the builder)",
    "fill": "memset writes 0.0 whatever the fill value (the cost does not depend on it)",
    "reduction": "nansum, max/min of two tensors and reductions over dims that are neither "
                 "the last one, a leading prefix (sum, mean) nor all (sum, mean) are timed as "
                 "a sum or max of the chunk-major layout's elements, not the op's",
    "layer_norm": "instance norm: normalised as rows of the last dim",
    "group_norm": "a group longer than the rows kept whole runs in pieces, each normalised "
                  "alone with one weight and bias value (timing of the two passes)",
    "layer_norm_backward": "group norm: rows of the last dim, its [N, groups] statistics and "
                           "[channels] weight read as one per row and column",
    "mm": "matmul, inner, vdot: not established (no semantics case); _grouped_mm and "
          "_scaled_mm: their group offsets and scales are not applied",
    "addmm": "addmv: its [M] bias is added as a row (its first element to every row)",
    "gather": "the indirect DMA reads whole rows of the table's last dim at the indices: "
              "other index ops (take, index with several index tensors, embedding_bag) are "
              "timed as that gather",
    "scatter": "the indirect DMA adds whole rows of the last dim at the indices: scatter, "
               "scatter_reduce, index_copy and the other ops are timed as that scatter-add",
    "nll_loss": "one element per target is picked along dim 1 (nll_loss_nd, reduction "
                "'none' and class weights are timed as that)",
    "nll_loss_backward": "one element per target is written along dim 1 (reduction 'none' "
                         "and class weights are timed as that)",
    "pointwise_loss": "BCE, soft margin and KL: the recipe is their instruction count "
                      "(subtract, multiply), not their formula",
    "pointwise_loss_backward": "all but mse_loss_backward: the recipe is their instruction "
                               "count, not their formula",
    "scan": "tensor_tensor_scan(x, x, multiply, add) per chunk stands in for the scan (rows "
            "are cut at chunk boundaries)",
    "sort": "four GpSimd maximum passes stand in for topk (no topk instruction yet)",
    "rearrange": "a flat copy through SBUF stands in for the rearrangement",
    "arange": "iota per chunk of the chunk-major layout, not the element's index",
    "tril": "affine_select with a stand-in pattern",
    "view": "a view moves no data (no program)",
    "convolution": "implicit GEMM with im2col views that load 1/reuse of the patch elements",
    "convolution_backward": "two GEMMs over im2col views (timing only)",
    "pool": "k passes over output-sized slices of each chunk stand in for the windows",
    "spread": "one VectorE add per tap over the chunk stands in for the neighbourhood",
    "sdpa_forward": "operand shapes simplified: a [p, 1] row statistic meets [p, D] tiles in "
                    "one instruction (the interpreter cannot run it)",
    "sdpa_backward": "not established: no semantics case (the forward's program is not exact)",
    "foreach_norm": "an ord other than 1 and 2 is summed as squares (with their square root)",
    "fused_optimizer": "the functional variant: its output lists are read back as one list",
}


def _elementwise_reason(op: OpSpec, rule: str, chip) -> str | None:
    """Why an element-wise op of an EXACT rule is not exact with these arguments."""
    name = op.op
    outs = [o for o in op.outputs if isinstance(o, TensorSpec)]
    arith = rule == "binary" or name == "aten::pow"     # broadcasts, scalar first: elementwise()
    if rule == "unary_vector" and len(op.inputs) > 1 \
            and name not in ("aten::pow", "aten::clamp", "aten::clip"):
        return "its second tensor (clamp_min.Tensor's bound) is charged as the immediate 1.0"
    if rule != "fill" and not arith and op.args and not isinstance(op.args[0], TensorSpec) \
            and not tensor_list(op.args[0]):
        return "its first operand is a scalar (the recipe reads its first tensor first)"
    if any(isinstance(a, TensorSpec) and not a.on_device for a in op.args):
        return "a CPU scalar tensor's value is not in the program (charged as the immediate 1.0)"
    numel = {t.numel for t in (*op.inputs, *outs)}
    if rule != "fill" and len(numel) > 1 and rule != "foreach":
        if not arith or len(outs) != 1:
            return STAND_IN
        why = plan(outs[0], op.inputs[:2], chip)[1]
        if why:
            return why
    scalars = [a for a in op.args
               if a is not None and not isinstance(a, TensorSpec) and not tensor_list(a)]
    if name == "aten::gelu":
        return None
    if name == "aten::gelu_backward" and op.arg(2) == "tanh":
        return "approximate='tanh': no derivative table for the tanh form (charged as gelu_dx)"
    if name == "aten::softplus_backward" and number(op.arg(3)) < 17:
        return ("a threshold below 17 (sigmoid(beta * x) is 1.0 in FP32 only above it: torch "
                "passes grad through above the threshold)")
    if name == "aten::where" and len(op.inputs) < 2:
        return "both branches are scalars (charged as a multiply and an add)"
    if name == "aten::softplus" and scalars not in ([], [1], [1, 20]):
        return "beta and threshold are not applied (ScalarE softplus)"
    # (rsub applies alpha unless it broadcasts: elementwise._rsub)
    alpha_free = ("aten::add", "aten::sub") + (("aten::rsub",) if len(numel) > 1 else ())
    if name in alpha_free and len(op.inputs) >= 2 and scalars not in ([], [1]):
        return "alpha is not applied (charged as one tensor_tensor)"
    if name in alpha_free and len(op.inputs) == 1 and scalars[1:] not in ([], [1]):
        return "alpha is not applied (charged as one tensor_scalar)"
    if name == "aten::div" and (any(isinstance(s, str) for s in scalars)
                                or op.kwargs.get("rounding_mode")):
        return "the rounding mode is not applied"
    if rule == "fill" and (len(op.inputs) > 1 or any(isinstance(s, (int, float)) and s != 0
                                                     for s in scalars)):
        return TIMING_ONLY["fill"]
    if name in ("aten::clamp", "aten::clip") and len(op.inputs) > 1:
        return "tensor bounds are not applied (charged as one tensor_scalar)"
    if name == "aten::masked_fill" and len(op.inputs) > 2:
        return "a tensor fill value is not applied (charged as a copy)"
    if rule == "unary_activation" and scalars and name not in ("aten::hardtanh",
                                                               "aten::leaky_relu"):
        return f"its arguments {scalars} are not applied"
    if rule == "copy_like" and outs and outs[0].dtype.startswith(("int", "uint", "bool")) \
            and not op.inputs[-1].dtype.startswith(("int", "uint", "bool")):
        return "a float to integer cast rounds to nearest in the ISA semantics (torch truncates)"
    if any(isinstance(s, (tuple, list)) for s in scalars) and rule != "fill":
        return "a list of scalars (one per member) is not applied"
    if rule == "foreach":
        lists = [a for a in op.args if tensor_list(a)]
        if name in ("aten::_foreach_add", "aten::_foreach_sub") and len(lists) > 1 \
                and scalars not in ([], [1]):
            return "alpha is not applied"
        if any(len(lst) != len(lists[0]) or any(a.numel != b.numel for a, b in zip(lst, lists[0]))
               for lst in lists):
            return "the lists' members differ in size"
    return None


def _optimizer_reason(op: OpSpec) -> str | None:
    """Why a fused optimizer step is not exact with these arguments."""
    if op.outputs:
        return TIMING_ONLY["fused_optimizer"]
    lists = [a for a in op.args if tensor_list(a)]
    tensors = [t for a in op.args for t in (a if tensor_list(a) else [a])
               if isinstance(t, TensorSpec)]
    if any(not t.on_device for t in tensors):
        return "a CPU tensor's value (step or lr) is not in the program"
    if any(isinstance(a, TensorSpec) for a in op.args[-2:]):
        return "grad_scale and found_inf are not applied"
    if any(len({t.dtype for t in lst}) > 1 for lst in lists):
        return "a list's members differ in dtype (streamed as the first's)"
    sized = [a for i, a in enumerate(op.args) if tensor_list(a) and i != STEPS_ARG.get(op.op)]
    if any([t.numel for t in lst] != [t.numel for t in sized[0]] for lst in sized):
        return "the lists' members differ in size"
    return None


def _reduction_reason(op: OpSpec, chip) -> str | None:
    """Why a reduction is not exact: over the last dim every op of EXACT's (a norm of order 2;
    rows up to chip.row_whole_max_elems); sum and mean over a leading prefix of dims (the
    columns, as many as a row holds) or over every element."""
    x = op.inputs[0]
    dims = _reduce_dims(op, x) if x.ndim else ()
    if len(op.inputs) > 1:          # max.other / min.other
        return TIMING_ONLY["reduction"]
    if x.ndim and dims == (x.ndim - 1,) and x.shape[-1] > 1 and not (
            x.ndim == 1 and x.numel > chip.row_whole_max_elems):
        if x.shape[-1] > chip.row_whole_max_elems:
            return (f"rows longer than {chip.row_whole_max_elems} run in pieces, each piece "
                    "reduced alone (timing of the two passes)")
        return None                 # (nansum is not in EXACT: never asked)
    if op.op in ("aten::sum", "aten::mean") and (len(dims) == x.ndim or leading_prefix(
            dims, x.ndim) and op.outputs[0].numel <= chip.row_whole_max_elems):
        return None
    return TIMING_ONLY["reduction"]


def why_unchecked(op: OpSpec, chip=None) -> str | None:
    """Why op's lowered program cannot be checked against the op's values; None: it can."""
    rule = rule_for(op.name)
    if rule is None:
        return "it has no lowering rule (it is timed by the roofline estimate)"
    name = rule.__name__
    if op.op not in EXACT.get(name, ()):
        return TIMING_ONLY.get(name, f"rule {name} is not in semantics.EXACT (never checked)")
    tensors = [*op.inputs, *(o for o in op.outputs if isinstance(o, TensorSpec))]
    # (a batch norm that evaluates returns empty saved statistics; batch_norm_backward's
    # reserve is empty)
    empty_ok = op.outputs[1:] if name == "batch_norm" else \
        op.args[10:11] if name == "batch_norm_backward" else ()
    if any(t.numel == 0 for t in tensors if not any(t is o for o in empty_ok)):
        return "an empty tensor"
    if name not in ("mm", "addmm", "linear") and not all(t.is_contiguous for t in tensors):
        return ("a strided operand is addressed as runs with one-element gaps (the same "
                "descriptors, a timing-equivalent layout), not at its strides")
    c = get_chip(chip)
    if name in ("unary_activation", "unary_vector", "binary", "ternary", "activation_backward",
                "copy_like", "copy_d2d", "fill", "foreach"):
        return _elementwise_reason(op, name, c)
    if name in ("pointwise_loss", "pointwise_loss_backward"):
        n = 3 if name.endswith("backward") else 2       # (grad,) self, target
        if len(op.inputs) != n or len({t.numel for t in op.inputs[-2:]}) > 1 \
                or op.inputs[0].numel not in (1, op.inputs[-1].numel):
            return ("a broadcast or CPU scalar operand (timing: loaded once as its first "
                    "elements)")
        return None
    if name == "fused_optimizer":
        return _optimizer_reason(op)
    if name == "foreach_norm":
        return None if op.arg(1, 2) in (1, 2) else TIMING_ONLY[name]
    if name == "cat":
        return "an input of another dtype is copied through SBUF at a stand-in offset" if any(
            t.dtype != op.outputs[0].dtype for t in op.inputs) else None
    x = op.inputs[0]
    if name in ("gather", "scatter"):
        return _indirect_reason(op, x)
    if name in ("nll_loss", "nll_loss_backward"):
        return _nll_reason(op)
    if name in ("batch_norm", "batch_norm_backward"):
        return None if x.ndim >= 2 else "no channel dim (normalised as one channel)"
    if name == "reduction":
        return _reduction_reason(op, c)
    if name == "softmax":
        backward = op.op.endswith("_backward_data")         # (grad, output, dim, input_dtype)
        last = op.arg(2 if backward else 1)
        last = last[0] if isinstance(last, tuple) and len(last) == 1 else last
        if x.ndim == 0 or last not in (-1, x.ndim - 1) or x.shape[-1] < 2:
            return "softmax over a leading dim"
        if x.shape[-1] > c.row_whole_max_elems:
            return (f"rows longer than {c.row_whole_max_elems} run in pieces, each piece "
                    "normalised or reduced alone (timing of the two passes)")
        if len({t.dtype for t in tensors}) > 1 or not backward and op.arg(2):
            return "an operand of another dtype (half_to_float, or the backward's input_dtype)"
        return None
    if name == "group_norm":        # rows: a group of a sample each
        return TIMING_ONLY[name] if group_rows(op)[1] > c.row_whole_max_elems else None
    if name in ("layer_norm", "layer_norm_backward"):
        backward = name == "layer_norm_backward"    # (grad, input, normalized_shape, ...)
        g, x = x, op.inputs[1] if backward else x
        shape = op.arg(2 if backward else 1)
        if not isinstance(shape, (tuple, list)) or len(shape) != 1 or x.shape[-1] < 2:
            return "normalised over other than the last dim (rows of its last dim here)"
        if backward:
            weight = op.arg(BACKWARD_ARGS[op.op][0])
            n = backward_row_max(c, g, x, op.outputs[0],
                                 weight if isinstance(weight, TensorSpec) else None)
            return (f"rows longer than {n} run in pieces, each with a row's statistics "
                    "(timing)") if x.shape[-1] > n else None
        if x.shape[-1] > c.row_whole_max_elems:
            return (f"rows longer than {c.row_whole_max_elems} run in pieces, each piece "
                    "normalised alone (timing of the two passes)")
        if "rms" not in op.op and op.arg(2) is None and isinstance(op.arg(3), TensorSpec):
            return "a bias without a weight is applied as the weight"
        return None
    # matmul family: tile-major outputs are read back where the rule placed their blocks
    a, b = (op.inputs[1], op.inputs[2]) if name == "addmm" else (x, op.inputs[1])
    for t in (a, b):
        strides = [s for s, n in zip(t.strides[-2:], t.shape[-2:]) if n > 1]
        if strides and 1 not in strides:
            return "an operand with no unit stride is read as if K or its other dim had one"
    if name == "linear" and any(n > 1 and s != x.strides[-2] * prod(x.shape[d + 1:-1])
                                for d, (n, s) in enumerate(zip(x.shape[:-2], x.strides[:-2]))):
        return "x's rows are read one stride (x.strides[-2]) apart"
    N = b.shape[-2 if name == "linear" else -1] if b.ndim >= 2 else 1
    bias = x if name == "addmm" else op.inputs[2] if len(op.inputs) > 2 else None
    if bias is not None and (bias.numel != N or bias.shape[-1] != N or not bias.is_contiguous):
        return "only a [N] bias is applied (its first N elements, broadcast over the rows)"
    alpha, beta = addmm_scales(op) if name == "addmm" else (1, 1)
    if alpha != 1 and beta not in (0, 1):
        return "alpha and beta both other than 1: only alpha is applied (matmul._evacuate)"
    return None


def _indirect_reason(op: OpSpec, x: TensorSpec) -> str | None:
    """Why a gather or scatter-add (movement._indirect_rows: whole rows of a 2-D table, or
    elements of a 1-D one, at one index tensor's values) is not exact with these arguments."""
    ints = [t for t in op.inputs if t.dtype.startswith(("int", "uint"))]
    if len(ints) != 1:
        return "one index tensor is gathered by (an index per dim is timed as that gather)"
    if op.op == "aten::embedding_dense_backward":
        if op.arg(3, -1) not in (-1, None) or op.arg(4):
            return "padding_idx and scale_grad_by_freq are not applied"
        x = TensorSpec((op.arg(2), op.inputs[0].shape[-1]))          # the weight's gradient
    elif op.op == "aten::index_put" and not op.arg(3):
        return "an overwrite (accumulate=False) is timed as the scatter-add"
    elif op.op in ("aten::index_select", "aten::gather", "aten::index_add") and op.arg(1) != 0:
        return "not along dim 0 (the indirect DMA moves rows of dim 0)"
    if op.op == "aten::index_add" and op.kwargs.get("alpha", op.arg(4, 1)) != 1:
        return "alpha is not applied"
    if op.op == "aten::gather":
        return None if x.ndim == 1 else ("gather picks self[index[i, j], j]: the column is "
                                         "not in the indirect pattern (whole rows of dim 0)")
    if x.ndim != 2:
        return "rows are the table's last dim: only a 2-D table is exact"
    values = op.inputs[-1]
    if op.op in ("aten::index_add", "aten::index_put") \
            and values.numel != ints[0].numel * x.shape[-1]:
        return "the values are broadcast (added as rows of their own)"
    return None


def _nll_reason(op: OpSpec) -> str | None:
    """Why nll_loss (or its backward) is not exact with these arguments: rules/norm.py picks
    one element per target along dim 1 ([N, C] or [N, C, H, W]), skips targets outside
    [0, C) and applies no weight."""
    k = 1 if op.op.endswith("_backward") else 0        # (grad_output first)
    x = op.args[k]
    weight, reduction, ignore = op.arg(k + 2), op.arg(k + 3, 1), op.arg(k + 4, -100)
    if x.ndim < 2:
        return "a 1-D input (one target): not established (no semantics case)"
    if weight is not None or reduction not in (1, 2):
        return "a class weight or reduction 'none' is not applied (timed as the mean)"
    if 0 <= ignore < x.shape[1]:
        return (f"ignore_index {ignore} is a class: only an ignore_index outside [0, C) is "
                "skipped (out of bounds of the indirect DMA)")
    if k and reduction == 1 and not isinstance(op.arg(6), TensorSpec):
        return "the mean's total_weight is not a tensor"
    return None


def _strided(buf: np.ndarray, t: TensorSpec) -> np.ndarray:
    """t's elements inside its HBM buffer (flat), as a writeable array of t's shape."""
    flat = buf.reshape(-1)
    return as_strided(flat, t.shape, tuple(s * flat.itemsize for s in t.strides),
                      writeable=True)


def _placed(buf: np.ndarray, t: TensorSpec, blocks) -> np.ndarray:
    """Output t read from its HBM buffer: at its strides, or, when the rule stored it in
    blocks away from their row-major place (`LowerCtx.placed`: a matmul's tile-major
    layout), each block from where it went (an element no block holds stays NaN)."""
    if blocks is None:
        return _strided(buf, t)
    flat, out = buf.reshape(-1), np.full(t.numel, np.nan, buf.dtype)
    for at, rows, cols, first, stride in blocks:
        out[first + np.arange(rows)[:, None] * stride + np.arange(cols)] = \
            flat[at:at + rows * cols].reshape(rows, cols)
    return out.reshape(t.shape)


def _held(op: OpSpec, rule: str):
    """(what op reads, what it writes) as its program holds them in HBM: [(key, members,
    whole)], `whole` for a tensor list streamed as one flat tensor (a foreach or fused
    optimizer rule's, and _foreach_norm's norms, keyed by optimizer.list_identity: its members
    one after the other), else one tensor per key."""
    def one(t):
        return LowerCtx.key(t), (t,), False
    reads, writes = [one(t) for t in op.inputs], [one(t) for t in op.outputs]
    if rule in ("foreach", "fused_optimizer"):
        reads = [(("id", list_identity(lst)), tuple(lst), True) for lst in op.args
                 if tensor_list(lst)]
        reads += [one(a) for a in op.args if isinstance(a, TensorSpec) and a.on_device]
    if rule in ("foreach", "fused_optimizer", "foreach_norm"):   # (the norms: one list)
        writes = [(("id", list_identity(op.outputs)), tuple(op.outputs), True)]
    return reads, writes


def _plan(ops, chip):
    """(external inputs, written outputs) of a sequence (ops with ids), each {key: (members,
    whole)}: what must be placed in HBM before its program runs and what its ops write (the
    last writer of a key wins). Raises Uncheckable naming the first op whose program is not
    the op's, or whose operand the program would read from an HBM tensor nothing writes."""
    external, written, parts = {}, {}, set()
    unwritten = set()           # views of intermediates: nothing in the program writes them
    for i, op in enumerate(ops):
        where = f"{op.name} (op {i} of a sequence of {len(ops)})"
        rule = rule_for(op.name)
        if rule is not None and rule.__name__ == "view":
            if any(LowerCtx.key(t) in written or LowerCtx.key(t) in unwritten
                   for t in op.inputs):
                unwritten.update(LowerCtx.key(t) for t in op.outputs)
            continue            # else its outputs are the caller's values, placed like inputs
        if any(LowerCtx.key(t) in unwritten for t in op.inputs):
            raise Uncheckable(f"{where}: reads a view of an intermediate from HBM, which "
                              "nothing in the program writes (the timing of a reload)")
        reason = why_unchecked(op, chip)
        if reason is not None:
            raise Uncheckable(f"{where}: its lowering cannot be checked: {reason}")
        reads, writes = _held(op, rule.__name__)
        for key, members, whole in reads:
            if key in written:
                continue
            if any(LowerCtx.key(t) in parts for t in members):
                raise Uncheckable(f"{where}: reads {'a list' if whole else 'a tensor'} an "
                                  "earlier op wrote in another form (a foreach list as one "
                                  "flat tensor, or its members one by one)")
            external.setdefault(key, (members, whole))
        for key, members, whole in writes:
            written[key] = (members, whole)
            parts.update(LowerCtx.key(t) for t in members)
    return external, written


class _Outputs(dict):
    """run_lowered_sequence's answer: {tensor id: array}, and `read_in_other_layout`: {tensor
    id: the op that read it} of the intermediates the timed program reads from SBUF in another
    layout than their writer's (from HBM in the checked program: _CheckedCtx)."""
    read_in_other_layout: dict = {}


class _CheckedCtx(LowerCtx):
    """LowerCtx that tells how each resident intermediate is read. The element-wise and row
    plans write and read SBUF chunk by chunk in the chunk-major layout ([p, f] at free offset
    `off` holds elements off*p + i*f + c): a read of exactly a block its writer wrote (`load`,
    `load_rows`) is that block's values; any other read (another chunk width or partition
    count, a matmul operand read K-major) takes the tile's bytes in a layout the writer did
    not write: the timing of a compiler that writes the intermediate in its reader's layout,
    not the values (`other_layout`). A read that the resident copy cannot serve in place goes
    to HBM after `LowerCtx.in_hbm` stores the copy's flat-plan part: its values when the writer
    wrote that as one block, else `other_layout` too. `via_hbm` keys are read from HBM
    instead (stored whatever `live` says), so the checked program runs every op on its
    operands' values."""

    def __init__(self, *args, via_hbm=frozenset(), **kw):
        super().__init__(*args, **kw)
        self.via_hbm = via_hbm
        self.op_index = 0
        self.blocks = {}            # key -> the (p, off, f) blocks written into its SBUF copy
        self.other_layout = {}      # key -> (tensor, the first op reading it in another layout)
        self._mode = None           # "chunks" inside load / load_rows, "write" in out_tile

    def _in(self, mode, method, *args, **kw):
        self._mode = mode
        try:
            return method(*args, **kw)
        finally:
            self._mode = None

    def load(self, *args, **kw):
        return self._in("chunks", super().load, *args, **kw)

    def load_rows(self, *args, **kw):
        return self._in("chunks", super().load_rows, *args, **kw)

    def out_tile(self, t, p, cols, j, f, role="out", off=None):
        ap = self._in("write", super().out_tile, t, p, cols, j, f, role, off)
        if self.key(t) in self._resident:
            self.blocks.setdefault(self.key(t), set()).add((p, j * f if off is None else off, f))
        return ap

    def resident_ap(self, t, p, off, f):
        k = self.key(t)
        if self._mode == "write" or k not in self.blocks:
            return super().resident_ap(t, p, off, f)
        if k in self.via_hbm:
            return None
        ap = super().resident_ap(t, p, off, f)
        if ap is not None and not (self._mode == "chunks" and (p, off, f) in self.blocks[k]):
            self.other_layout.setdefault(k, (t, self.op_index))
        return ap

    def in_hbm(self, t):
        k = self.key(t)
        p, cols = self.flat_shape(t)
        if k in self._resident and not self.needs_store(t) \
                and self.blocks.get(k) != {(p, 0, cols)}:
            self.other_layout.setdefault(k, (t, self.op_index))
        return super().in_hbm(t)

    def needs_store(self, t):
        return super().needs_store(t) or self.key(t) in self.via_hbm

    def _release(self, k):
        super()._release(k)
        self.blocks.pop(k, None)    # (a copy made again later holds only its new writer's)


def _device_array(t: TensorSpec, a) -> np.ndarray:
    """An input's values as the device holds them: FP32 (rounded to t's dtype when loaded), or
    int32 for an integer tensor (torch's int64 indices are int32 on the device: spec.py)."""
    a = np.asarray(a)
    if a.dtype.kind not in "iub" or not t.dtype.startswith(("int", "uint")):
        return a.astype(np.float32).reshape(t.shape)
    if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        raise ValueError(f"an integer input of {t.shape} holds values outside int32, the "
                         "device's integer type")
    return a.astype(np.int32).reshape(t.shape)


def run_lowered_sequence(ops, inputs, chip=None, live_outputs=None, read_inputs=()) -> dict:
    """The outputs of the ONE program `lower_sequence` builds for `ops` (in order), built in
    full and run through the ISA semantics: {tensor id: array}, in the tensors' storage
    dtypes, of every output the program stores where the caller sees it (`live_outputs`, ids;
    None: every output) and of the external inputs `read_inputs` names (an in-place op's
    arguments, after it). `inputs`: {tensor id: array} of at least the sequence's external
    inputs (a view's outputs count as such: a view moves no data); tensors without ids get
    them as lower_sequence gives them (api.assign_ids). Raises Uncheckable naming the first op
    that is not exact (`_plan`).

    lower_sequence times this one program only when every op fits a representative one; big
    ops are timed in parts that pass their intermediates through HBM, while this program
    keeps every op in one (LNC 1)."""
    from .api import assign_ids, sequence_ctx
    ops = assign_ids(list(ops))
    chip = get_chip(chip)
    external, written = _plan(ops, chip)
    live = None if live_outputs is None else {("id", x) for x in live_outputs}
    missing = [t.id for members, _w in external.values() for t in members if t.id not in inputs]
    if missing:
        raise ValueError(f"no input arrays for tensor(s) {missing} of the sequence "
                         f"{[o.name for o in ops]}")
    def build(via_hbm):
        ctx = sequence_ctx(ops, chip, 1, None if live is None else set(live),
                           keep_operands=True, full=True, via_hbm=via_hbm, ctx_type=_CheckedCtx)
        for i, op in enumerate(ops):
            ctx.op_index = i
            rule_for(op.name)(ctx, op)
            ctx.end_op()
            ctx.free_dead(i)
        return ctx
    ctx = build(frozenset())
    other = {t.id: ops[i].name for t, i in ctx.other_layout.values()}
    if other:            # built again with those read from HBM (_CheckedCtx)
        ctx = build(frozenset(ctx.other_layout))
    buffers = {}
    for key, (members, whole) in external.items():
        h = ctx._hbm.get(key)
        if h is None:               # (a fill never reads its input)
            continue
        values = [_device_array(t, inputs[t.id]) for t in members]
        kind = np.int32 if values[0].dtype == np.int32 else np.float32
        buf = buffers.setdefault(h.name, np.zeros(h.shape, kind))
        if whole:                   # a foreach list: its members one after the other
            flat = np.concatenate([v.reshape(-1) for v in values])
            buf[:flat.size] = flat
        else:
            _strided(buf, members[0])[...] = values[0]
    res = execute(ctx.b.build(), buffers)
    got = _Outputs()
    # the outputs the caller sees, then the inputs read_inputs names (written in place)
    reads = [(k, m, w) for k, (m, w) in written.items()
             if live is None or k in live or any(LowerCtx.key(t) in live for t in m)]
    reads += [(k, m, w) for k, (m, w) in external.items() if any(t.id in read_inputs for t in m)]
    for key, members, whole in reads:
        h = ctx._hbm.get(key)
        if h is None and all(t.numel == 0 for t in members):
            continue                # (an empty output: a batch norm's saved statistics in eval)
        if h is None:
            raise Uncheckable(f"{[o.name for o in ops]}: the program never writes output(s) "
                              f"{[t.id for t in members]}")
        at = 0
        for t in members:
            v = res[h.name][at:at + t.numel].reshape(t.shape) if whole \
                else _placed(res[h.name], t, ctx.placed.get(key))
            got[t.id] = np.array(v).astype(np_dtype(t.dtype))
            at += t.numel
    got.read_in_other_layout = other
    return got


def run_lowered(op: OpSpec, inputs, chip=None, written=()) -> list:
    """The outputs of op's lowered program run through the ISA semantics, one array per op
    output (in the output's storage dtype), then the values after it of the inputs whose
    indices `written` gives (an in-place op's arguments). `inputs`: one array per device
    tensor input of `op` (op.inputs order: tensor lists flattened). Raises Uncheckable for the
    ops `why_unchecked` names."""
    from .api import _with_ids
    reason = why_unchecked(op, chip)
    if reason is not None:
        raise Uncheckable(f"{op.name}: its lowering cannot be checked: {reason}")
    op = _with_ids(op, lambda t, is_out, k: ("o" if is_out else "x", k))
    if len(inputs) != len(op.inputs):
        raise ValueError(f"{op.name}: {len(inputs)} input arrays for {len(op.inputs)} device "
                         "inputs")
    values = {t.id: a for t, a in zip(op.inputs, inputs)}
    steps = op.arg(STEPS_ARG.get(op.op, len(op.args)))
    if steps and len({float(np.asarray(values[t.id]).reshape(-1)[0]) for t in steps}) > 1:
        raise Uncheckable(f"{op.name}: its lowering cannot be checked: its members' steps "
                          "differ (the program's bias corrections are the first member's)")
    results = [*op.outputs, *(op.inputs[i] for i in written)]
    # (run_lowered_sequence raises for every result it lacks but an empty one)
    got = run_lowered_sequence([op], values, chip,
                               read_inputs={op.inputs[i].id for i in written})
    return [got[t.id] if t.id in got else np.zeros(t.shape, np_dtype(t.dtype))
            for t in results]


def _difference(spec: TensorSpec, got, want, rtol, atol):
    """None when `got` (an output of a lowered program) matches `want` at the tolerance
    check_lowered documents, else "up to <largest difference> (rtol .., atol ..)"."""
    r = rtol if rtol is not None else (2e-2 if itemsize(spec.dtype) < 4 else 1e-3)
    g, w = got.astype(np.float32), np.asarray(want, np.float32).reshape(got.shape)
    finite = np.abs(w[np.isfinite(w)])
    a = atol if atol is not None else r * max(float(finite.max()) if finite.size else 0.0, 1e-30)
    if np.allclose(g, w, rtol=r, atol=a, equal_nan=True):
        return None
    return f"up to {float(np.nanmax(np.abs(g - w))):.3g} (rtol {r:.3g}, atol {a:.3g})"


def check_lowered(op: OpSpec, inputs, outputs, rtol=None, atol=None, chip=None,
                  written=()) -> None:
    """Raise RuntimeError when op's lowered program, run through the ISA semantics on `inputs`,
    differs from `outputs` (one array per op output, then one per input `written` names, as
    run_lowered returns them). Default tolerance by output dtype:
    FP32 rtol 1e-3 (sums and matmuls accumulate in another order), bfloat16/FP16/FP8 rtol 2e-2
    (rounded at other points); atol is rtol times the output's largest magnitude (at least 1e-3
    of it for FP32), so a result of tiny values is compared at its own scale."""
    got = run_lowered(op, inputs, chip, written)
    results = [*op.outputs, *(op.inputs[i] for i in written)]
    for i, (t, g, w) in enumerate(zip(results, got, outputs)):
        diff = _difference(t, g, w, rtol, atol)
        if diff is not None:
            raise RuntimeError(
                f"{op.name}: output {i} of its lowered program (ISA semantics) differs from the "
                f"op's result by {diff}; input shapes {[x.shape for x in op.inputs]}, output "
                f"shapes {[o.shape for o in op.outputs]}: the rule "
                f"({rule_for(op.name).__name__}) computes something else; fix it or list it in "
                "semantics.TIMING_ONLY")


def check_lowered_sequence(ops, inputs, outputs, live_outputs=None, rtol=None, atol=None,
                           chip=None) -> None:
    """Raise RuntimeError when an output of `ops`' one program (`run_lowered_sequence`)
    differs from `outputs` ({tensor id: array}; outputs the program does not store, or without
    an array, are not compared), at check_lowered's tolerances. The message names the op that
    wrote the first differing output. With the values of that op's operands known (`inputs`
    or `outputs` may hold every tensor of the sequence), each exact op up to it is first
    checked alone (check_lowered), so a rule that is wrong by itself is named as such; when
    they all agree alone, the message says the values went wrong between ops."""
    from .api import assign_ids
    ops = assign_ids(list(ops))
    got = run_lowered_sequence(ops, inputs, chip, live_outputs)
    known = {**inputs, **outputs}
    last = {t.id: i for i, op in enumerate(ops) for t in op.outputs}     # (in-place writes)
    for i, op in enumerate(ops):
        for k, t in enumerate(op.outputs):
            if t.id not in got or t.id not in outputs or last[t.id] != i:
                continue
            diff = _difference(t, got[t.id], outputs[t.id], rtol, atol)
            if diff is not None:
                _blame(ops, i, known, rtol, atol, chip)
                raise RuntimeError(
                    f"{op.name} (op {i} of a sequence of {len(ops)}: "
                    f"{', '.join(o.name for o in ops)}): output {k} of the sequence's lowered "
                    f"program (ISA semantics) differs from its value by {diff}, output shape "
                    f"{t.shape}; each op whose values are known agrees alone: the values go "
                    "wrong between ops (SBUF residency, skipped stores, reloads: "
                    "LowerCtx.resident_ap, needs_store)")


def _blame(ops, last: int, known, rtol, atol, chip) -> None:
    """check_lowered of each exact op of `ops` up to `last` whose operands' values are all in
    `known` (an op that writes a tensor it reads is skipped: `known` holds one value per
    tensor)."""
    for j, op in enumerate(ops[:last + 1]):
        ids = [t.id for t in op.inputs]
        if why_unchecked(op, chip) is not None or set(ids) & {t.id for t in op.outputs} \
                or not all(i in known for i in (*ids, *(t.id for t in op.outputs))):
            continue
        try:
            check_lowered(op, [known[i] for i in ids], [known[t.id] for t in op.outputs],
                          rtol, atol, chip)
        except RuntimeError as e:
            raise RuntimeError(f"op {j} of a sequence of {len(ops)}: {e}") from None
