// Streams of a simulated NeuronCore: a default stream and a pool per device, and the
// thread-local current stream (as CUDA's, so the autograd worker has its own).
#pragma once

#include <c10/core/Stream.h>

namespace neuron {

constexpr int kStreamsPerPool = 32;
constexpr int kStreamSlots = kStreamsPerPool + 1;  // slot 0 is the default stream

c10::Stream default_stream(c10::DeviceIndex device);
c10::Stream stream_from_pool(c10::DeviceIndex device);
c10::Stream current_stream(c10::DeviceIndex device);
// Makes `stream` current on its device for this thread; returns the previous one.
c10::Stream exchange_stream(const c10::Stream& stream);

}  // namespace neuron
