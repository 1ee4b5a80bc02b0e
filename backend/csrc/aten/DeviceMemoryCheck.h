// While a CPU kernel computes for a 'neuron' device, the host memory it allocates stands for
// that device's HBM: an allocation that cannot fit in the device's free simulated HBM raises
// the device's torch.OutOfMemoryError before any host memory is taken (a 160 GB matmul
// result would otherwise reach the host allocator, or the host's OOM killer).
#pragma once

#include <c10/core/Device.h>

namespace neuron {

// Host allocations on this thread are checked against `device` while the scope lives.
class DeviceMemoryScope {
 public:
  explicit DeviceMemoryScope(c10::DeviceIndex device);
  ~DeviceMemoryScope();
  DeviceMemoryScope(const DeviceMemoryScope&) = delete;
  DeviceMemoryScope& operator=(const DeviceMemoryScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

}  // namespace neuron
