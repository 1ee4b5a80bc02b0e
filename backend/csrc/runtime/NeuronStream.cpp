#include "runtime/NeuronStream.h"

#include "runtime/NeuronRuntime.h"

#include <array>
#include <atomic>

namespace neuron {

namespace {
std::array<std::atomic<uint32_t>, kMaxDevices> g_next_pool_slot{};
thread_local std::array<c10::StreamId, kMaxDevices> t_current_stream{};  // 0: default

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}
}  // namespace

c10::Stream default_stream(c10::DeviceIndex device) { return make_stream(device, 0); }

c10::Stream stream_from_pool(c10::DeviceIndex device) {
  check_device_index(device);
  // Without HostCC, TorchNeuron hands out the default stream for every new stream.
  if (!config().host_cc_streams) return default_stream(device);
  const uint32_t slot = g_next_pool_slot[device]++ % kStreamsPerPool;
  return make_stream(device, static_cast<c10::StreamId>(slot + 1));
}

c10::Stream current_stream(c10::DeviceIndex device) {
  check_device_index(device);
  return make_stream(device, t_current_stream[device]);
}

c10::Stream exchange_stream(const c10::Stream& stream) {
  const c10::DeviceIndex device = stream.device_index();
  check_device_index(device);
  c10::Stream previous = current_stream(device);
  t_current_stream[device] = stream.id();
  return previous;
}

}  // namespace neuron
