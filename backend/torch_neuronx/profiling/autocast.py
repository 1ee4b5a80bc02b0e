"""The profiled steps as `torch.autocast("neuron", dtype=torch.bfloat16)` would issue them: the bf16
advice's re-timed program (advice.bf16_autocast).

The drained batches hold the queue's own op descriptions (name, tensor layouts and dtypes,
storages). This rewrites their dtypes and inserts the casts autocast and autograd add, with the
rules torch applies (backend/csrc/aten/Autocast.cpp registers CUDA's op lists for neuron):

- forward, a matmul-family op (`LOWER`): every float32 tensor operand is cast to bf16 first
  (`neuron::copy_d2d`, as the queue names a cast), the output is bf16. Casts of tensors the step
  did not compute (parameters, inputs) are made once per step, as autocast caches a leaf
  parameter's cast; an intermediate is cast at each use.
- forward, an op autocast runs in float32 (`FP32`: layer norm, softmax, pow, losses...): bf16
  operands are cast to float32 first.
- any other op computes in its operands' type (torch's promotion: float32 if any float32 operand
  of one or more dimensions, else bf16); an in-place op keeps its tensor's type, a cast its own.
- backward (no autocast; autograd casts a gradient to its forward tensor's type): a matmul-family
  op reads the bf16 copies the forward saved, and a float32 gradient reaching it is cast once; a
  float32-list op's backward reads float32 and, when its forward input was cast up, its gradient
  is cast back down; an element-wise backward op whose gradient and saved tensor differ casts the
  gradient to the saved tensor's type. A gradient the optimizer reads is cast back to float32
  right after it is made, in the view the optimizer reads (parameters stay float32).
- the optimizer's ops are unchanged.

A cast is reused until its storage is written again through any view. F.cross_entropy's
log_softmax is kept in its input type (as torch 2.13 issues it on neuron). Known difference from
a real autocast step (the same casts, by shape and direction, on the demo GPT): a gradient
leaving a float32 region is cast where the next matmul reads it rather than where it leaves, so
a few element-wise backward ops run in float32 instead of bf16."""

from __future__ import annotations

import itertools
import math

import torch

from neuron_sim.lower.spec import dense_order
from neuron_sim.program.ap import row_major

from .. import _C
from ..cost import HOST_COPIES, TensorDesc, queued_op, tensor_desc as _desc

CAST = "neuron::copy_d2d"        # how the queue names a dtype-changing copy (a cast)
LOW, FP32 = torch.bfloat16, torch.float32


def _listed(*policies) -> frozenset:
    """The ops the extension registers for autocast with these policies (aten/Autocast.cpp,
    torch's own lists), by name without overload, as the advice matches the queue's names."""
    return frozenset(op.split(".")[0] for op, policy in _C._autocast_ops() if policy in policies)


# The queue names an op by what reaches the device: a listed composite arrives as the op it
# decomposes into (matmul of two vectors as dot, SDPA as one of its backends, softmax as
# _softmax...), which keeps the type autocast gave the composite's operands.
LOWER = _listed("lower_precision_fp") | {"aten::" + n for n in (
    "dot", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention_for_cpu")}
# forward, and the backward ops of float32-list ops that read their saved float32 tensors
FP32_OPS = _listed("fp32", "fp32_set_opt_dtype", "fp32_append_dtype") | {"aten::" + n for n in (
    "native_group_norm", "nll_loss_forward", "nll_loss2d_forward", "_softmax",
    "native_layer_norm_backward", "native_group_norm_backward", "nll_loss_backward",
    "nll_loss2d_backward", "mse_loss_backward", "_softmax_backward_data")}
_BACKWARD_FP32 = frozenset(n for n in FP32_OPS if n.endswith(("_backward", "_backward_data")))

# in-place ops that overwrite their tensor whatever it held (they read none of it): it keeps
# its own type
OVERWRITING = frozenset("aten::" + n for n in ("fill_", "zero_", "normal_", "uniform_",
                                               "bernoulli_", "random_", "exponential_"))
_BIAS_FIRST = frozenset("aten::" + n for n in ("addmm", "baddbmm", "addbmm", "addmv", "addr"))
_fake_storage = itertools.count(3 << 61)     # storages of the tensors the casts make


def _is_t(a) -> bool:
    return type(a) is TensorDesc


def _dev(t) -> bool:
    """A device tensor with storage: the kind autocast casts and this rewrite tracks."""
    return type(t) is TensorDesc and t.on_neuron and bool(t.storage) and t.dtype in (FP32, LOW)


def _retyped(t, dtype) -> TensorDesc:
    return _desc(t.sizes, t.strides, dtype, t.storage, t.offset, t.on_neuron)


class Rewrite:
    """One profiled region rewritten op by op; `items(item, phase)` returns the ops autocast
    would issue in its place. `casts` counts the casts added."""

    def __init__(self):
        self.casts = 0
        self.reset()

    def reset(self):
        """A new step: autocast's cast cache and the step's tensors start afresh."""
        self.dtype = {}       # storage -> dtype of the tensor the step computed there
        self.made_in = {}     # storage -> phase that computed it
        self.copy = {}        # _key(t, dtype) -> (storage of the cast, phase that cast it)
        self.cast_of = {}     # storage -> its keys in self.copy
        self.island = set()   # storages of float32-list outputs whose input autocast cast

    def _now(self, t):
        d = self.dtype.get(t.storage) if _dev(t) else None
        return t if d is None or d == t.dtype else _retyped(t, d)

    @staticmethod
    def _key(t, dtype):
        """A dense tensor is cast whole, in memory order, so every view of it (a weight and its
        transpose) reads the one copy; a strided slice is cast on its own."""
        dense = dense_order(t.sizes, t.strides)
        return (t.storage, t.offset, dense, dtype) if dense is not None \
            else ((t.storage, t.offset, t.sizes, t.strides), dtype)

    @staticmethod
    def _read(t, dtype, storage):
        return _desc(t.sizes, t.strides if dense_order(t.sizes, t.strides) is not None
                     else row_major(t.sizes), dtype, storage)

    def _cached(self, t, dtype, phase=None):
        hit = self.copy.get(self._key(t, dtype))
        if hit is None or (phase is not None and hit[1] != phase):
            return None
        return self._read(t, dtype, hit[0])

    def _cast(self, t, dtype, out, device, stream, phase, reuse=True):
        """`t` in `dtype`, adding the cast to `out` unless an earlier one can be `reuse`d."""
        hit = self._cached(t, dtype) if reuse else None
        if hit is not None:
            return hit
        dense = dense_order(t.sizes, t.strides)
        storage = next(_fake_storage)
        if dense is not None:        # cast the storage in memory order; read it back as t reads
            src = _desc(dense, row_major(dense), t.dtype, t.storage, t.offset)
            dst = _desc(dense, row_major(dense), dtype, storage)
        else:
            src, dst = t, _desc(t.sizes, row_major(t.sizes), dtype, storage)
        out.append(queued_op(CAST, device, stream, (src,), (dst,)))
        self.casts += 1
        key = self._key(t, dtype)
        self.copy[key] = (storage, phase)
        self.cast_of.setdefault(t.storage, set()).add(key)
        return self._read(t, dtype, storage)

    def items(self, item, phase, feeds_optimizer=None) -> list:
        """`feeds_optimizer`: {storage: tensor} the optimizer reads next of this op's outputs
        (gradients)."""
        name, device, stream, args, outputs = (item.name, item.device, item.stream, item.args,
                                               item.outputs)
        if phase == "optimizer" or item.preset_ns >= 0 or name.startswith(HOST_COPIES):
            for o in _tensors(outputs):
                self._new_tensor(o)      # what it writes is its own, in the type it has
            return [item]
        base = name.split(".")[0]
        out = []
        # a copy between tensors of one type is a layout copy (.contiguous(), a reshape): its
        # output takes its input's new type; a copy between types (a cast) keeps its output's
        layout_copy = name == CAST and len(args) == 1 and _is_t(args[0]) and outputs \
            and _is_t(outputs[0]) and args[0].dtype == outputs[0].dtype

        def each(fn):
            return tuple([fn(t) for t in a] if isinstance(a, list) else
                         fn(a) if _is_t(a) else a for a in args)

        given = args
        args = each(self._now)
        backward = phase == "backward"
        lower, fp32 = base in LOWER, base in FP32_OPS and (not backward or base in _BACKWARD_FP32)
        if backward and not lower and not fp32:
            # a gradient autograd cast, or (pow's backward) a float32-list op's saved copy
            saved32 = base in FP32_OPS
            args = each(lambda t: (self._cached(t, LOW, "backward")
                                   or self._cached(t, FP32, "backward")
                                   or (saved32 and self._cached(t, FP32, "forward")) or t)
                        if _dev(t) else t)
        flat = [t for t in _tensors(args) if _dev(t)]
        island = back_down = False
        if lower:
            def low(t):
                if not _dev(t) or t.dtype != FP32:
                    return t
                # backward reads the forward's saved bf16 copy; the forward casts a leaf once
                # (autocast's cache) and an intermediate at each use
                reuse = backward or t.storage not in self.made_in
                return self._cast(t, LOW, out, device, stream, phase, reuse=reuse)
            # casts in autocast's order: linear(input, weight, bias) casts its arguments
            # right to left (C++ argument evaluation), so addmm's bias, weight, input
            order = [0, 2, 1] if base in _BIAS_FIRST and len(args) > 2 else \
                list(range(len(args)))[::-1]
            cast = list(args)
            for j in order:
                a = args[j]
                cast[j] = [low(t) for t in a] if isinstance(a, list) else low(a)
            args = tuple(cast)
            result = LOW
        elif fp32:
            before = self.casts
            args = each(lambda t: self._cast(t, FP32, out, device, stream, phase)
                        if _dev(t) and t.dtype == LOW else t)
            result = FP32
            # the forward cast a bf16 input up: backward casts the gradient back down after
            # this op's backward (autograd's cast of a gradient to its forward tensor's type)
            island = not backward and (self.casts > before or any(
                self._cached(t, FP32, "forward") for t in flat))
            back_down = backward and any(t.storage in self.island
                                         or self._cached(t, FP32, "forward")
                                         for t in flat)
        elif layout_copy:
            result = args[0].dtype
        else:
            result = self._promote(flat, backward)
            if backward and result is not None:
                args = each(lambda t: self._cast(t, result, out, device, stream, phase)
                            if _dev(t) and t.sizes and t.dtype != result
                            and self.made_in.get(t.storage) == "backward" else t)
        new_outs, after = [], []
        in_place = base.endswith("_")
        moved = in_place and args and _is_t(args[0]) and _is_t(given[0]) \
            and args[0].storage != given[0].storage
        for o in outputs:
            if not _dev(o):
                new_outs.append(o)
                continue
            if moved and o.storage == given[0].storage:
                # an in-place op on a gradient autograd cast: it updates the cast
                new_outs.append(args[0])
                self.made_in[args[0].storage] = phase
                continue
            if in_place and base not in OVERWRITING:
                d = self.dtype.get(o.storage, o.dtype)    # the tensor it updates keeps its type
            elif in_place or result is None or (name == CAST and not layout_copy):
                d = o.dtype        # fill_, zero_, a cast, a tensor made of no tensor: its own type
            else:
                d = result
            if in_place:
                self._forget(o)
            else:
                self._new_tensor(o)
            if backward and d != o.dtype and feeds_optimizer and o.storage in feeds_optimizer:
                # autograd hands the optimizer a float32 gradient, cast as the optimizer reads it
                made = _desc(o.sizes, row_major(o.sizes), d, next(_fake_storage))
                new_outs.append(made)
                read = feeds_optimizer[o.storage]
                if math.prod(read.sizes) != math.prod(o.sizes):
                    read = o                   # the optimizer reads part of it: cast it whole
                src = _desc(read.sizes, row_major(read.sizes), d, made.storage)
                after.append(queued_op(CAST, device, stream, (src,), (read,)))
                self.casts += 1
                d = o.dtype
            else:
                new_outs.append(_retyped(o, d))
            self.dtype[o.storage] = d
            self.made_in[o.storage] = phase
        out.append(queued_op(name, device, stream, args, tuple(new_outs), item.preset_ns,
                             item.seq))
        if island:
            self.island.update(o.storage for o in new_outs if _dev(o))
        grad = next((o for o in new_outs if _dev(o)), None)
        if back_down and grad is not None and grad.dtype == FP32:
            self._cast(grad, LOW, after, device, stream, phase)
        return out + after

    def _forget(self, o):
        """A write ends the casts of what its storage held, through any view (an in-place
        add_ to a gradient read before as a [b*t, c] view)."""
        for key in self.cast_of.pop(o.storage, ()):
            self.copy.pop(key, None)

    def _new_tensor(self, o):
        """A write not in place: nothing known of the storage's last tensor (its type, phase,
        casts) holds for this one. No free reaches the profiler, and the allocator hands a
        freed storage to the next tensor: a write is where a new tensor there begins."""
        self._forget(o)
        self.dtype.pop(o.storage, None)
        self.made_in.pop(o.storage, None)
        self.island.discard(o.storage)

    def _promote(self, flat, backward):
        """The type an element-wise op computes in; in backward the saved (forward) tensors'
        type wins over a gradient's, as autograd casts gradients to their forward type."""
        shaped = [t for t in flat if t.sizes] or flat
        if not shaped:
            return None
        if backward:
            saved = {t.dtype for t in shaped if self.made_in.get(t.storage) != "backward"}
            if len(saved) == 1:
                return saved.pop()
        kinds = {t.dtype for t in shaped}
        return FP32 if FP32 in kinds else LOW


def _tensors(group):
    """The device tensors with storage of an op's args or outputs."""
    for a in group:
        for t in (a if isinstance(a, list) else [a]):
            if _is_t(t) and t.on_neuron and t.storage:
                yield t


def _gradient_makers(batches, phases) -> dict:
    """{(batch, op): {storage: the tensor the optimizer reads there}} of the backward ops whose
    output the optimizer reads: the last write to a storage before an optimizer op reads it
    (the allocator reuses storages, so a storage the optimizer reads may hold other tensors
    earlier in the step), and the view it reads (a bias gradient made [1, n] is read [n])."""
    last, found = {}, {}
    for b, (batch, ps) in enumerate(zip(batches, phases)):
        for i, (item, phase) in enumerate(zip(batch, ps)):
            if phase == "optimizer":
                for t in _tensors(item.args):
                    if t.storage in last:
                        found.setdefault(last[t.storage], {}).setdefault(t.storage, t)
            for s in (t.storage for t in _tensors(item.outputs)):
                if phase == "backward":
                    last[s] = (b, i)
                else:
                    last.pop(s, None)
    return found


def autocast_batches(batches, phases) -> tuple:
    """(the batches rewritten, casts added). `batches`: [[item]]; `phases`: the phase of each
    item, per batch. A step starts where a forward op follows the optimizer; without an
    optimizer, at each batch (a sync point)."""
    rw = Rewrite()
    grads = _gradient_makers(batches, phases)
    new, last = [], None
    has_opt = any(p == "optimizer" for ps in phases for p in ps)
    for b, (batch, ps) in enumerate(zip(batches, phases)):
        if not has_opt:
            rw.reset()
        nb = []
        for i, (item, phase) in enumerate(zip(batch, ps)):
            if phase == "forward" and last == "optimizer":
                rw.reset()
            last = phase
            nb.extend(rw.items(item, phase, grads.get((b, i))))
        new.append(nb)
    return new, rw.casts
