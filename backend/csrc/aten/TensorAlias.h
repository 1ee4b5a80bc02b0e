// Zero-copy bridges between 'neuron' tensors and the CPU kernels that compute them:
// a CPU alias of device memory and adoption of a fresh CPU result as device memory (the
// Trainium dtype policy applied to results is in DtypePolicy.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>

namespace neuron {

inline bool on_neuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// A CPU tensor viewing the same bytes; it keeps the device storage alive. In time-only mode
// (TimeOnly.h) a Meta tensor of the same geometry instead, for kernels that compute shapes.
at::Tensor cpu_alias(const at::Tensor& neuron_tensor);
// The same over the CPU storage of `sibling`, a CPU alias of the same device storage: the two
// then share one CPU storage, and ATen's overlap checks see that they overlap.
at::Tensor cpu_alias_sharing(const at::Tensor& neuron_tensor, const at::Tensor& sibling);

// A 'neuron' tensor that takes over the memory of `cpu` (no copy), counted on `device`; for a
// Meta result of time-only mode, fresh device memory without values.
at::Tensor adopt_cpu_tensor(const at::Tensor& cpu, c10::DeviceIndex device);

// A 'neuron' tensor with `like`'s geometry over `storage` (a view of device memory).
at::Tensor neuron_view(const c10::Storage& storage, const at::Tensor& like);

c10::Storage make_neuron_storage(size_t nbytes, c10::DataPtr data);

// Held while CPU kernels compute what the device would: the ATen calls they make inside
// stand in for device execution, so torch.profiler must not list them as host ops (on
// Trainium the host sees only the op that launched the kernel).
using DeviceWorkScope = at::DisableRecordFunctionGuard;

}  // namespace neuron
