#include "aten/TensorAlias.h"

#include "aten/TimeOnly.h"
#include "runtime/NeuronAllocator.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>

namespace neuron {

namespace {
void release_storage(void* ctx) { delete static_cast<c10::Storage*>(ctx); }
void release_nothing(void*) {}

at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(key), like.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                      like.storage_offset());
  if (like.is_conj()) tensor._set_conj(true);
  if (like.is_neg()) tensor._set_neg(true);
  return tensor;
}

// Time-only mode: a Meta tensor over a Meta storage of the same size, so that kernels
// compute shapes only and views of it are recognised by their storage.
at::Tensor meta_alias(const at::Tensor& neuron_tensor) {
  c10::DataPtr ptr(nullptr, nullptr, &release_nothing, c10::Device(c10::DeviceType::Meta));
  c10::Storage meta_storage(c10::Storage::use_byte_size_t(), neuron_tensor.storage().nbytes(),
                            std::move(ptr), /*allocator=*/nullptr, /*resizable=*/false);
  return tensor_over(std::move(meta_storage), c10::DispatchKey::Meta, neuron_tensor);
}
}  // namespace

c10::Storage make_neuron_storage(size_t nbytes, c10::DataPtr data) {
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data), allocator(),
                      /*resizable=*/true);
}

at::Tensor cpu_alias(const at::Tensor& neuron_tensor) {
  if (time_only()) return meta_alias(neuron_tensor);
  check_has_values(neuron_tensor, "reading a neuron tensor");
  const c10::Storage& storage = neuron_tensor.storage();
  void* data = storage.mutable_data();
  c10::DataPtr ptr(data, new c10::Storage(storage), &release_storage,
                   c10::Device(c10::DeviceType::CPU));
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(ptr),
                           /*allocator=*/nullptr, /*resizable=*/false);
  return tensor_over(std::move(cpu_storage), c10::DispatchKey::CPU, neuron_tensor);
}

at::Tensor cpu_alias_sharing(const at::Tensor& neuron_tensor, const at::Tensor& sibling) {
  return tensor_over(sibling.storage(),
                     sibling.is_meta() ? c10::DispatchKey::Meta : c10::DispatchKey::CPU,
                     neuron_tensor);
}

at::Tensor adopt_cpu_tensor(const at::Tensor& cpu, c10::DeviceIndex device) {
  const c10::Storage& cpu_storage = cpu.storage();
  if (cpu.is_meta()) {
    // A time-only result: fresh device memory of its size, without values.
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
    return tensor_over(make_neuron_storage(cpu_storage.nbytes(),
                                           allocator()->allocate(cpu_storage.nbytes())),
                       c10::DispatchKey::PrivateUse1, cpu);
  }
  c10::Storage storage = make_neuron_storage(cpu_storage.nbytes(),
                                             allocator()->adopt(cpu_storage, device));
  return tensor_over(std::move(storage), c10::DispatchKey::PrivateUse1, cpu);
}

at::Tensor neuron_view(const c10::Storage& storage, const at::Tensor& like) {
  return tensor_over(storage, c10::DispatchKey::PrivateUse1, like);
}

}  // namespace neuron
