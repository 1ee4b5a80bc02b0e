#include "runtime/NeuronGuard.h"

#include "runtime/NeuronQueue.h"
#include "runtime/NeuronRuntime.h"
#include "runtime/NeuronStream.h"

#include <c10/util/Exception.h>

namespace neuron {

namespace {
thread_local c10::DeviceIndex t_current_device = 0;

SimEventPtr& as_event(void* event) { return *static_cast<SimEventPtr*>(event); }

// c10 passes index -1 for "the current device" (torch.Stream(device="neuron")).
c10::DeviceIndex resolve(c10::Device d) { return d.has_index() ? d.index() : t_current_device; }
}  // namespace

c10::DeviceIndex current_device() { return t_current_device; }

void set_current_device(c10::DeviceIndex device) {
  check_device_index(device);
  t_current_device = device;
}

c10::Device NeuronGuardImpl::exchangeDevice(c10::Device d) const {
  c10::Device previous = getDevice();
  if (d.index() != previous.index()) setDevice(d);
  return previous;
}

c10::Device NeuronGuardImpl::getDevice() const {
  return c10::Device(static_type, t_current_device);
}

void NeuronGuardImpl::setDevice(c10::Device d) const {
  TORCH_CHECK(d.type() == static_type, "Expected a neuron device, but got ", d);
  set_current_device(d.index());
}

void NeuronGuardImpl::uncheckedSetDevice(c10::Device d) const noexcept {
  t_current_device = d.index();
}

c10::Stream NeuronGuardImpl::getStream(c10::Device d) const { return current_stream(resolve(d)); }

c10::Stream NeuronGuardImpl::getDefaultStream(c10::Device d) const {
  return default_stream(resolve(d));
}

c10::Stream NeuronGuardImpl::getStreamFromGlobalPool(c10::Device d, bool) const {
  return stream_from_pool(resolve(d));
}

c10::Stream NeuronGuardImpl::getNewStream(c10::Device d, int) const {
  return stream_from_pool(resolve(d));
}

c10::Stream NeuronGuardImpl::exchangeStream(c10::Stream s) const { return exchange_stream(s); }

c10::DeviceIndex NeuronGuardImpl::deviceCount() const noexcept { return config().device_count; }

c10::DeviceCapability NeuronGuardImpl::getDeviceCapability(c10::Device d) const {
  check_device_index(resolve(d));
  // Every dtype can be allocated and converted on 'neuron' except the quantized ones (no
  // quantized backend; complex tensors exist and their ops run on CPU).
  c10::DeviceCapability capability;
  auto& types = capability.capability_data.supported_scalar_types;
  types.has_QInt8 = types.has_QUInt8 = types.has_QInt32 = 0;
  types.has_QUInt4x2 = types.has_QUInt2x4 = 0;
  return capability;
}

void NeuronGuardImpl::record(void** event, const c10::Stream& stream,
                             const c10::DeviceIndex device_index,
                             const c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
              "Event device index ", static_cast<int>(device_index),
              " does not match recording stream's device index ",
              static_cast<int>(stream.device_index()), ".");
  if (*event == nullptr) {
    auto* holder = new SimEventPtr(std::make_shared<SimEvent>());
    as_event(holder)->enable_timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    *event = holder;
  }
  SimEventPtr& sim_event = as_event(*event);
  TORCH_CHECK(sim_event->device == -1 || sim_event->device == stream.device_index(),
              "Event was recorded on neuron:", static_cast<int>(sim_event->device),
              " and cannot be recorded again on ", stream.device());
  enqueue_record(sim_event, stream);
}

void NeuronGuardImpl::block(void* event, const c10::Stream& stream) const {
  if (event == nullptr) return;
  enqueue_wait(as_event(event), stream);
}

bool NeuronGuardImpl::queryEvent(void* event) const {
  drain();
  return true;  // simulated work is complete once timed
}

void NeuronGuardImpl::destroyEvent(void* event, const c10::DeviceIndex) const noexcept {
  delete static_cast<SimEventPtr*>(event);
}

bool NeuronGuardImpl::queryStream(const c10::Stream&) const {
  drain();
  return true;
}

void NeuronGuardImpl::synchronizeStream(const c10::Stream&) const { drain(); }

void NeuronGuardImpl::synchronizeEvent(void*) const { drain(); }

void NeuronGuardImpl::synchronizeDevice(const c10::DeviceIndex device_index) const {
  if (device_index >= 0) check_device_index(device_index);  // -1: the current device
  drain();
}

double NeuronGuardImpl::elapsedTime(void* event1, void* event2,
                                    const c10::DeviceIndex device_index) const {
  TORCH_CHECK(event1 != nullptr && event2 != nullptr,
              "Both events must be recorded before calculating elapsed time.");
  drain();
  const SimEventPtr& start = as_event(event1);
  const SimEventPtr& end = as_event(event2);
  TORCH_CHECK(start->time_ns >= 0 && end->time_ns >= 0,
              "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK_VALUE(start->enable_timing && end->enable_timing,
                    "Both events must be created with argument 'enable_timing=True'.");
  TORCH_CHECK(start->device == end->device,
              "Timing events must be recorded on the same neuron device; got neuron:",
              static_cast<int>(start->device), " and neuron:", static_cast<int>(end->device), ".");
  return static_cast<double>(end->time_ns - start->time_ns) / 1.0e6;  // ms
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace neuron
