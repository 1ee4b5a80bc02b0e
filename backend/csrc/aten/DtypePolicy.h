// Trainium's 64-bit policy (TorchNeuron's documented behaviour): float64 and int64 *ops*
// compute in float32 / int32 and return the original dtype; storage, copies (to and from
// the host, between devices, views, clone) and random integer generation keep 64-bit values
// exactly. Where a computed value does not fit in 32 bits, the user is told once per op and
// dtype: a simulator can say what the hardware would do silently.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace neuron {

// Rounds `cpu`, a result of op `op_name_id`, in place to what 32-bit compute gives
// (float64 -> float32 precision, int64 -> int32 wrap-around) and warns once per op and
// dtype when that changed a value.
void apply_dtype_policy(const at::Tensor& cpu, int32_t op_name_id);

}  // namespace neuron
