#include "runtime/NeuronEvent.h"

#include "runtime/NeuronQueue.h"

#include <c10/util/Exception.h>

namespace neuron {

namespace {
SimEventPtr& as_event(void* event) { return *static_cast<SimEventPtr*>(event); }
}  // namespace

void record_event(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                  c10::EventFlag flag) {
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

void block_on_event(void* event, const c10::Stream& stream) {
  if (event == nullptr) return;  // never recorded: nothing to wait for
  enqueue_wait(as_event(event), stream);
}

void destroy_event(void* event) noexcept { delete static_cast<SimEventPtr*>(event); }

double event_elapsed_ms(void* start_event, void* end_event) {
  TORCH_CHECK(start_event != nullptr && end_event != nullptr,
              "Both events must be recorded before calculating elapsed time.");
  drain();
  const SimEventPtr& start = as_event(start_event);
  const SimEventPtr& end = as_event(end_event);
  TORCH_CHECK(start->time_ns >= 0 && end->time_ns >= 0,
              "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK_VALUE(start->enable_timing && end->enable_timing,
                    "Both events must be created with argument 'enable_timing=True'.");
  TORCH_CHECK(start->device == end->device,
              "Timing events must be recorded on the same neuron device; got neuron:",
              static_cast<int>(start->device), " and neuron:", static_cast<int>(end->device), ".");
  return static_cast<double>(end->time_ns - start->time_ns) / 1.0e6;
}

}  // namespace neuron
