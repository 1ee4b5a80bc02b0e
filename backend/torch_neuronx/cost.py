"""Simulated time of eager ops: the cost function the C++ queue calls when it drains.

Until an op family has a lowering to an ISA program (neuron_sim.lower), its time is a
roofline estimate from the chip spec: FLOPs over the TensorE peak for its dtype, bytes over
the logical core's HBM bandwidth, plus the per-op launch cost eager execution pays. Every
estimated op is counted, so users can see which numbers are modelled and which estimated.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

# Eager launch cost per op (named assumption). TorchNeuron runs each eager op as a cached
# NEFF; the runtime release notes say Trn3 cut NEFF start overhead "by 20 us", so a Trn2
# start costs more than that. Trn2: 25 us; Trn3: 5 us; Trn1 as Trn2.
EAGER_OP_LAUNCH_S = {"trn1": 25e-6, "trn2": 25e-6, "trn3": 5e-6}

# Op families by how their FLOPs are counted (names without overload).
_MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
               "aten::matmul", "aten::linear", "aten::dot", "aten::mv", "aten::addmv"}
_CONV_OPS = {"aten::convolution", "aten::_convolution", "aten::convolution_backward",
             "aten::mkldnn_convolution", "aten::_slow_conv2d_forward",
             "aten::_slow_conv2d_backward"}
_COPY_OPS = {"neuron::copy_h2d", "neuron::copy_d2h", "neuron::copy_d2d"}
# Host <-> device copies cross PCIe; a Gen5 x16 link moves ~50 GB/s in practice (assumed).
_PCIE_BYTES_PER_S = 50e9

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
                torch.float64: "float32", torch.float8_e4m3fn: "float8_e4m3",
                torch.float8_e5m2: "float8_e5m2"}


def _numel(sizes) -> int:
    return math.prod(sizes) if sizes else 1


def _bytes(t) -> int:
    sizes, _strides, dtype, _on_neuron = t
    if dtype is None:
        return 0
    itemsize = min(dtype.itemsize, 4)  # 64-bit types run in 32 bits on Trainium
    return _numel(sizes) * itemsize


def _tensors(args):
    for a in args:
        if isinstance(a, tuple) and len(a) == 4 and isinstance(a[0], tuple) and isinstance(a[3], bool):
            yield a
        elif isinstance(a, list):
            yield from (t for t in a if t[2] is not None)


def _matmul_flops(inputs, outputs) -> float:
    if not outputs:
        return 0.0
    out = outputs[0]
    mats = [t for t in inputs if len(t[0]) >= 1]
    if not mats:
        return 0.0
    k = mats[0][0][-1] if len(mats[0][0]) >= 1 else 1
    return 2.0 * _numel(out[0]) * k


def _conv_flops(inputs, outputs) -> float:
    if len(inputs) < 2 or not outputs:
        return 0.0
    weight = inputs[1][0]
    per_output = _numel(weight[1:]) if len(weight) > 1 else 1
    return 2.0 * _numel(outputs[0][0]) * per_output


class RooflineCostModel:
    """Per-op simulated nanoseconds from the spec of the simulated instance."""

    def __init__(self, visible):
        self.instance = visible.instance
        self.lnc = visible.lnc
        chip = self.instance.chip
        self.hbm_bytes_per_s = self.instance.hbm_bytes_per_s_per_logical_core(self.lnc)
        self.launch_ns = 1e9 * EAGER_OP_LAUNCH_S[chip.name]
        self._peak = {}
        self._cache = {}
        self.estimated = Counter()   # op name -> count timed by roofline
        self.executed = set()        # op names that ran as Neuron ops

    def peak_flops(self, dtype) -> float:
        name = _DTYPE_NAMES.get(dtype, "float32")
        if name not in self._peak:
            self._peak[name] = self.instance.peak_flops_per_logical_core(name, self.lnc)
        return self._peak[name]

    def op_ns(self, name, args, outputs) -> int:
        inputs = list(_tensors(args))
        key = (name, tuple((t[0], t[2]) for t in inputs), tuple((t[0], t[2]) for t in outputs))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        moved = sum(_bytes(t) for t in inputs) + sum(_bytes(t) for t in outputs)
        if name in _COPY_OPS:
            ns = 1e9 * (moved / 2) / (_PCIE_BYTES_PER_S if name != "neuron::copy_d2d"
                                      else self.hbm_bytes_per_s)
            ns += self.launch_ns
        else:
            flops = 0.0
            base = name.split(".")[0]
            if base in _MATMUL_OPS:
                flops = _matmul_flops(inputs, outputs)
            elif base in _CONV_OPS:
                flops = _conv_flops(inputs, outputs)
            dtype = (inputs[0][2] if inputs else (outputs[0][2] if outputs else torch.float32))
            compute_ns = 1e9 * flops / self.peak_flops(dtype) if flops else 0.0
            memory_ns = 1e9 * moved / self.hbm_bytes_per_s
            ns = max(compute_ns, memory_ns) + self.launch_ns
        result = int(round(ns))
        self._cache[key] = result
        return result

    def __call__(self, batch, at_sync):
        out = []
        for _seq, name, _device, _stream, args, outputs, preset_ns in batch:
            if preset_ns >= 0:  # duration known already (compiled graph, collective, kernel)
                out.append(preset_ns)
                continue
            out.append(self.op_ns(name, args, outputs))
            if not name.startswith("neuron::"):
                self.estimated[name] += 1
                self.executed.add(name)
        return out
