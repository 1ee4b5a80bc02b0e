#include "aten/DeviceMemoryCheck.h"

#include "runtime/NeuronAllocator.h"
#include "runtime/NeuronRuntime.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

namespace neuron {

namespace {

thread_local c10::DeviceIndex t_device = -1;

// The CPU allocator, wrapped: outside a DeviceMemoryScope it only forwards.
class CheckedCpuAllocator final : public c10::Allocator {
 public:
  explicit CheckedCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t nbytes) override {
    if (t_device >= 0 && nbytes > 0) check_fits(t_device, nbytes);   // the device's own OOM
    return inner_->allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return inner_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* inner_;
};

// Installed once when the extension loads, above the default CPU allocator's priority.
// Never destroyed: CPU allocations made by other libraries' static destructors at exit
// would otherwise call into a destroyed object (a pure virtual call, SIGABRT).
const bool g_installed = [] {
  c10::SetCPUAllocator(new CheckedCpuAllocator(c10::GetCPUAllocator()), /*priority=*/1);
  return true;
}();

}  // namespace

DeviceMemoryScope::DeviceMemoryScope(c10::DeviceIndex device) : previous_(t_device) {
  t_device = device;
}

DeviceMemoryScope::~DeviceMemoryScope() { t_device = previous_; }

}  // namespace neuron
