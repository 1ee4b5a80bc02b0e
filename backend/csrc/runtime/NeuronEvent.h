// Events: a stamp on a stream's simulated clock. Recording queues the stamp behind the work
// already queued on the stream (the drain writes the time); a wait makes the stream's clock
// catch up with it; elapsed time is the difference of two stamps. c10 holds an event as an
// opaque pointer, created on its first record; these functions are the guard's event half.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <memory>

namespace neuron {

struct SimEvent {
  int64_t time_ns = -1;  // stream clock when the recorded work finished; -1 never recorded
  c10::DeviceIndex device = -1;
  bool enable_timing = false;
};
using SimEventPtr = std::shared_ptr<SimEvent>;

void record_event(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                  c10::EventFlag flag);
void block_on_event(void* event, const c10::Stream& stream);
void destroy_event(void* event) noexcept;
// Drains the queue first, so both stamps are written.
double event_elapsed_ms(void* start_event, void* end_event);

}  // namespace neuron
