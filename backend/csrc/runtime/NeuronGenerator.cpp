#include "runtime/NeuronGenerator.h"

#include "runtime/NeuronRuntime.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <mutex>

namespace neuron {

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) { cpu_.set_current_seed(seed); }
void NeuronGeneratorImpl::set_offset(uint64_t offset) { cpu_.set_offset(offset); }
uint64_t NeuronGeneratorImpl::get_offset() const { return cpu_.get_offset(); }
uint64_t NeuronGeneratorImpl::current_seed() const { return cpu_.current_seed(); }
uint64_t NeuronGeneratorImpl::seed() { return cpu_.seed(); }

void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  auto* copy = new NeuronGeneratorImpl(device().index(), 0);
  copy->cpu_ = cpu_.clone();
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::array<at::Generator, kMaxDevices> generators;
  static std::mutex mutex;
  if (device < 0) {
    device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
  }
  check_device_index(device);
  std::lock_guard<std::mutex> lock(mutex);
  if (!generators[device].defined()) {
    generators[device] = at::make_generator<NeuronGeneratorImpl>(device, c10::default_rng_seed_val);
  }
  return generators[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) {
    device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
  }
  check_device_index(device);
  return at::make_generator<NeuronGeneratorImpl>(device, c10::default_rng_seed_val);
}

const at::Generator& cpu_generator_of(const at::Generator& gen) {
  auto* impl = dynamic_cast<NeuronGeneratorImpl*>(gen.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "Expected a neuron generator, got one for ", gen.device());
  return impl->cpu_generator();
}

}  // namespace neuron
