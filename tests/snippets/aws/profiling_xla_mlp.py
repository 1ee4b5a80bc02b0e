# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-explorer/how-to-profile-workload.html
# (aws-neuron/aws-neuron-sdk tools/neuron-explorer/how-to-profile-workload.rst, "Capturing a
# profile with PyTorch", the start of the full code example). Verbatim imports: it is written for
# PyTorch/XLA (torch_xla, torch_neuronx.experimental.profiler), which TorchNeuron replaces with
# torch.profiler + torch_neuronx.profiling.NeuronConfig; the snippet test skips it.
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# XLA imports
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp

import torch_neuronx
from torch_neuronx.experimental import profiler
