// PrivateUse1 hooks: availability, device count, generators, storage resize.
#include "runtime/NeuronAllocator.h"
#include "runtime/NeuronGenerator.h"
#include "runtime/NeuronGuard.h"
#include "runtime/NeuronRuntime.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>

#include <cstring>

namespace neuron {

namespace {

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return config().device_count > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return config().device_count; }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    lazy_init();
    set_current_device(device);
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex previous = current_device();
    set_current_device(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device);
  }
  at::Device getDeviceFromPtr(void*) const override {
    return c10::Device(c10::DeviceType::PrivateUse1, current_device());
  }
  // TorchNeuron reports host memory as pinned: the device reads it directly.
  bool isPinnedPtr(const void*) const override { return true; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    const size_t old_bytes = impl->nbytes();
    if (new_bytes == old_bytes) return;
    c10::DeviceGuard guard(impl->data_ptr().device());
    c10::DataPtr fresh = allocator()->allocate(new_bytes);
    if (old_bytes > 0 && new_bytes > 0) {
      std::memcpy(fresh.get(), impl->data(), std::min(old_bytes, new_bytes));
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }
};

struct Registration {
  Registration() { at::RegisterPrivateUse1HooksInterface(new NeuronHooks()); }
} g_registration;

}  // namespace

}  // namespace neuron
