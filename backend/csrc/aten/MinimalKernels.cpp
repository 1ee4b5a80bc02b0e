// The kernels that must not go through the CPU fallback, because they own device
// memory or tensor geometry: allocation, copies, resize, set_ and views.
#include "aten/OpDescriptor.h"
#include "aten/TensorAlias.h"
#include "aten/TimeOnly.h"
#include "runtime/NeuronAllocator.h"
#include "runtime/NeuronGuard.h"
#include "runtime/NeuronQueue.h"
#include "runtime/NeuronRuntime.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace neuron {

namespace {

constexpr c10::DispatchKeySet kNeuronKeys{c10::DispatchKey::PrivateUse1};

// The device an allocation asks for (the current one without an index), initialised and checked.
c10::Device ready_device(std::optional<c10::Device> device) {
  const c10::DeviceIndex index =
      device.has_value() && device->has_index() ? device->index() : current_device();
  lazy_init();
  check_device_index(index);
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(ready_device(device));
  return at::detail::empty_generic(size, allocator(), kNeuronKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  c10::DeviceGuard guard(ready_device(device));
  return at::detail::empty_strided_generic(size, stride, allocator(), kNeuronKeys,
                                           c10::dtype_or_default(dtype));
}

// Whether `t` covers every byte of its storage (a copy into it then defines all its values).
bool covers_storage(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() && t.storage_offset() == 0 &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

// Moves the bytes (with dtype conversion) between host and device through CPU aliases.
void copy_values(const at::Tensor& self, const at::Tensor& dst, bool non_blocking,
                 bool to_device, bool from_device) {
  at::Tensor dst_cpu = to_device ? cpu_alias(dst) : dst;
  // Both sides over one device storage share one CPU storage: CPU's copy_ then rejects a
  // partial overlap (z[1:].copy_(z[:-1])) with its own error, as on CPU.
  at::Tensor src_cpu = !from_device ? self
                       : to_device && self.storage().is_alias_of(dst.storage())
                           ? cpu_alias_sharing(self, dst_cpu)
                           : cpu_alias(self);
  DeviceWorkScope device_work;
  dst_cpu.copy_(src_cpu, non_blocking);
}

at::Tensor charge_copy(const at::Tensor& self, const at::Tensor& dst, bool to_device,
                       bool from_device) {
  const at::Tensor& device_side = to_device ? dst : self;
  static const int32_t h2d = intern_op_name("neuron::copy_h2d");
  static const int32_t d2h = intern_op_name("neuron::copy_d2h");
  static const int32_t d2d = intern_op_name("neuron::copy_d2d");
  const int32_t name = to_device ? (from_device ? d2d : h2d) : d2h;
  std::vector<ArgDesc> args(1);
  args[0].kind = ArgDesc::kTensor;
  args[0].tensors.push_back(describe_tensor(self));
  charge(name, device_side.device().index(), std::move(args), {describe_tensor(dst)});
  if (!to_device) drain();
  return dst;
}

// Copies between host and device, or within the device, through CPU aliases; DMA time
// is charged on the device side. A copy to the host is a sync point. Copies keep every
// bit, 64-bit values included (DMA moves bytes; only compute is 32-bit on Trainium).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const bool to_device = on_neuron(dst);
  const bool from_device = on_neuron(self);
  if (time_only()) {
    if (!to_device) {
      raise_needs_values("aten::_copy_from (a copy to the host: .cpu(), .to('cpu'), .numpy(), "
                         "print)", "time the step with torch.Event or the profiler instead.");
    }
    set_holds_values(dst.storage(), false);
  } else {
    const bool fills_valueless = to_device && !holds_values(dst.storage()) && covers_storage(dst);
    // A whole-tensor copy into memory of time-only mode defines it (load_state_dict after a
    // time-only build): the alias need not hold values before the copy.
    if (fills_valueless) set_holds_values(dst.storage(), true);
    try {
      copy_values(self, dst, non_blocking, to_device, from_device);
    } catch (...) {
      if (fills_valueless) set_holds_values(dst.storage(), false);
      throw;
    }
  }
  return charge_copy(self, dst, to_device, from_device);
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  if (time_only()) {
    raise_needs_values("aten::_local_scalar_dense (Tensor.item(), float(t), bool(t), if t:)",
                       "keep the value on the device (e.g. accumulate the loss as a tensor), or "
                       "run this part outside torch_neuronx.time_only().");
  }
  drain();
  DeviceWorkScope device_work;
  return cpu_alias(self).item();
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                     source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty = make_neuron_storage(0, allocator()->allocate(0));
  return set_storage(self, std::move(empty), 0, {0}, {});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", resize_);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
}

// Copies resolve conjugate/negative views themselves (the CPU aliases keep those bits);
// the math-bit fallbacks would otherwise materialise them with clone -> copy_ -> _copy_from
// and recurse forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace neuron
