// Host-memory allocator for 'neuron' tensors with per-device statistics and a
// simulated HBM capacity: a tensor's bytes live in host memory, but a device can
// hold no more than its logical NeuronCore's share of HBM.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

namespace neuron {

class NeuronAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Takes ownership of a CPU storage's memory as device memory without a copy
  // (results of CPU kernels run by the fallback).
  c10::DataPtr adopt(const c10::Storage& cpu_storage, c10::DeviceIndex device);
};

NeuronAllocator* allocator();

// False for device memory allocated or written in time-only mode (aten/TimeOnly.h): its bytes
// are not the tensor's values. set_holds_values records a write (false in time-only mode; true
// when a copy outside it fills the whole storage).
bool holds_values(const c10::Storage& storage);
void set_holds_values(const c10::Storage& storage, bool has_values);

// Raises torch.OutOfMemoryError (counted in num_ooms) if nbytes would not fit in the
// device's free simulated HBM; reserves nothing.
void check_fits(c10::DeviceIndex device, size_t nbytes);

}  // namespace neuron
