// The backend="neuron" process group: a c10d::Backend that moves the bytes of 'neuron'
// tensors with a host backend (gloo) on zero-copy CPU aliases of device memory. Before each
// operation it calls a Python hook that validates the call across ranks and charges the
// operation's simulated time to the stream (torch_neuronx/distributed/backend.py).
#pragma once

#include <pybind11/pybind11.h>

namespace neuron {

// Defines torch_neuronx._C._NeuronBackend; needs torch.distributed imported first.
void init_distributed_bindings(pybind11::module_ m);

}  // namespace neuron
