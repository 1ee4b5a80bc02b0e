// Whether `param.data = other` may move a tensor between 'neuron' and the host in place.
//
// Module._apply (`.to("neuron")`, `.cpu()`, `module.neuron()`, `to_empty`) keeps each
// Parameter object, and so weight tying and optimizer references, only when this op says
// the old and new tensors are shallow-copy compatible. c10 answers yes for dense tensors
// of CPU, CUDA, MPS, HIP, XPU, HPU and MTIA, and leaves PrivateUse1 to its backend: without
// this kernel every conversion to 'neuron' made new Parameters and untied shared weights.
// A neuron tensor is a dense strided TensorImpl like a CPU one, so the same rule applies.
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

namespace neuron {

namespace {

bool dense_host_or_neuron(const at::Tensor& t) {
  // Meta is not: a meta<->neuron pair dispatches to Meta's kernel (MetaBit ranks above
  // PrivateUse1Bit), so to_empty of a meta-initialised model unties as it does on CUDA.
  constexpr auto backends = c10::DispatchKeySet(
      {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
  const c10::DispatchKeySet keys = t.key_set();
  return t.layout() == c10::kStrided && keys.has(c10::DispatchKey::Dense) &&
         keys.has_any(backends);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.key_set() == from.key_set()) return true;
  return dense_host_or_neuron(self) && dense_host_or_neuron(from);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", &has_compatible_shallow_copy_type);
}

}  // namespace neuron
