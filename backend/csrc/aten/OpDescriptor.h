// Builds the descriptor of an op for the simulator's cost model from its arguments.
#pragma once

#include "runtime/NeuronQueue.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace neuron {

TensorDesc describe_tensor(const at::Tensor& t);
ArgDesc describe_ivalue(const c10::IValue& value);

// Queues `name` on the current stream of `device` with the given arguments and outputs.
void charge(const std::string& name, c10::DeviceIndex device, std::vector<ArgDesc>&& args,
            std::vector<TensorDesc>&& outputs);
void charge(int32_t name_id, c10::DeviceIndex device, std::vector<ArgDesc>&& args,
            std::vector<TensorDesc>&& outputs);

}  // namespace neuron
