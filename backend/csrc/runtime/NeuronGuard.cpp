#include "runtime/NeuronGuard.h"

#include "runtime/NeuronEvent.h"
#include "runtime/NeuronQueue.h"
#include "runtime/NeuronRuntime.h"
#include "runtime/NeuronStream.h"

#include <c10/util/Exception.h>

namespace neuron {

namespace {
thread_local c10::DeviceIndex t_current_device = 0;

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
  record_event(event, stream, device_index, flag);
}

void NeuronGuardImpl::block(void* event, const c10::Stream& stream) const {
  block_on_event(event, stream);
}

bool NeuronGuardImpl::queryEvent(void* event) const {
  drain();
  return true;  // simulated work is complete once timed
}

void NeuronGuardImpl::destroyEvent(void* event, const c10::DeviceIndex) const noexcept {
  destroy_event(event);
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
                                    const c10::DeviceIndex) const {
  return event_elapsed_ms(event1, event2);
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace neuron
