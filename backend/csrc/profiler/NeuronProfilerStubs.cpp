// Profiler stubs of PrivateUse1 (torch.autograd.profiler.profile(use_device="neuron")): the
// autograd profiler asks them for a device and a host timestamp at every op boundary.
// Device rows come from the Kineto plugin (NeuronActivityProfiler.cpp), so the stubs record no
// device event: an event record would advance the simulated clock of the profiled program.
#include "runtime/NeuronGuard.h"
#include "runtime/NeuronQueue.h"
#include "runtime/NeuronRuntime.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

namespace neuron {

namespace {

struct NeuronProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (device != nullptr) *device = current_device();
    if (event != nullptr) event->reset();
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub*,
                const torch::profiler::impl::ProfilerVoidEventStub*) const override {
    return 0.0f;  // device time is reported by the Kineto plugin's rows
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex i = 0; i < config().device_count; ++i) {
      c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, i));
      op(i);
    }
  }
  void synchronize() const override { drain(); }
};

struct Registration {
  Registration() {
    static NeuronProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} g_registration;

}  // namespace

}  // namespace neuron
