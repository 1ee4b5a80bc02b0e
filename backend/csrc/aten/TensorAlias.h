// Zero-copy bridges between 'neuron' tensors and the CPU kernels that compute them:
// a CPU alias of device memory, adoption of a fresh CPU result as device memory, and
// the Trainium dtype policy applied to results.
#pragma once

#include <ATen/core/Tensor.h>

namespace neuron {

// A CPU tensor viewing the same bytes; it keeps the device storage alive.
at::Tensor cpu_alias(const at::Tensor& neuron_tensor);

// A 'neuron' tensor that takes over the memory of `cpu` (no copy), counted on `device`.
at::Tensor adopt_cpu_tensor(const at::Tensor& cpu, c10::DeviceIndex device);

// A 'neuron' tensor with `like`'s geometry over `storage` (a view of device memory).
at::Tensor neuron_view(const c10::Storage& storage, const at::Tensor& like);

// Trainium computes float64 as float32 and int64 as int32 and returns the original
// dtype (TorchNeuron's documented policy); rounds `cpu` in place accordingly.
void apply_dtype_policy(const at::Tensor& cpu);

c10::Storage make_neuron_storage(size_t nbytes, c10::DataPtr data);

}  // namespace neuron
