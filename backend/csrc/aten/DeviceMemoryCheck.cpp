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
    if (t_device >= 0 && nbytes > 0) check_fits(t_device, nbytes);
    return inner_->allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return inner_->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

 private:
  // Same text as the device allocator's own OOM (with TorchNeuron's "(OOM)" marker).
  static void check_fits(c10::DeviceIndex device, size_t nbytes) {
    const auto [available, total] = allocator()->getMemoryInfo(device);
    if (nbytes <= available) return;
    TORCH_CHECK_WITH(OutOfMemoryError, false, "NRT allocation failed for size ", nbytes,
                     " (OOM): neuron:", static_cast<int>(device), " tried to allocate ", nbytes,
                     " bytes with ", available, " bytes free of ", total, " bytes of simulated HBM (",
                     config().instance_name, "). Free tensors you no longer need (del, then "
                     "torch.neuron.empty_cache()), use a smaller batch, or choose an instance "
                     "with more memory per core.");
  }

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
