#pragma once
// torch.autocast(device_type="neuron"): the op lists it registers, for the profiler's advice.
#include <string>
#include <utility>
#include <vector>

namespace neuron {

// (op name with overload, policy) of every AutocastPrivateUse1 kernel, e.g.
// ("aten::pow.Tensor_Scalar", "fp32"); the policy of binary_cross_entropy is "banned".
const std::vector<std::pair<std::string, std::string>>& autocast_ops();

}  // namespace neuron
