// The wire format between the descriptor queue and the Python cost model: a drained batch is
// a torch_neuronx._C.OpBatch, each op in it a QueuedOp, each tensor a TensorDesc, all with
// named fields (OpBatch.cpp documents them). Python builds batches of its own to price ops that
// never ran (the profiler's advice) and in tests.
#pragma once

#include <pybind11/pybind11.h>

namespace neuron {

void bind_op_batch(pybind11::module& m);

// Makes `fn(batch: OpBatch, at_sync: bool) -> [ns per op]` the queue's cost function.
void register_cost_function(pybind11::function fn);

}  // namespace neuron
