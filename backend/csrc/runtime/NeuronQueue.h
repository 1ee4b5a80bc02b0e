// The descriptor queue: every op on a 'neuron' device appends a description of itself
// (no Python, no GIL); at sync points the queue is drained: a cost function registered
// by Python turns descriptors into simulated nanoseconds, and the stream clocks, events
// and the profiler's activity log advance in issue order.
#pragma once

#include "runtime/NeuronEvent.h"

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace neuron {

struct TensorDesc {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  int8_t device_type = 0;  // 0 neuron, 1 cpu (0-dim scalars allowed into neuron ops)
  // Where the data lives: the storage (its address while alive; 0 for none) and the element
  // offset into it. Lets the cost model tell which op reads which earlier op's output.
  uint64_t storage = 0;
  int64_t offset = 0;
};

// One argument of an op, as much as a cost model needs.
struct ArgDesc {
  enum Kind : uint8_t { kNone, kTensor, kTensorList, kDouble, kInt, kBool, kInts, kOther };
  Kind kind = kNone;
  double number = 0.0;
  std::vector<int64_t> ints;
  std::vector<TensorDesc> tensors;
};

struct OpDesc {
  uint64_t seq = 0;               // issue order, unique in the process
  int32_t name_id = 0;            // index into op_names()
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0;
  uint64_t correlation_id = 0;    // profiler's id of the launching CPU op, 0 if none
  int64_t host_wall_ns = 0;       // when the host issued it (only while profiling)
  int32_t host_tid = 0;           // the issuing thread's system id (only while profiling)
  int64_t preset_ns = -1;         // known duration (compiled graph, collective, NKI kernel)
  int32_t key = -1;               // interned layout key (runtime/OpKeys.h); -1 with a preset
  std::vector<ArgDesc> args;
  std::vector<TensorDesc> outputs;
};

// Engine-level detail of one op for the profiler: a lane (TensorE, VectorE, a DMA queue...)
// busy from `offset_ns` after the op's start for `duration_ns`, doing `label`.
struct LaneSpan {
  int32_t lane_id;       // index into lane_names()
  int64_t offset_ns;
  int64_t duration_ns;
  std::string label;
};

// One row of simulated device activity for the profiler.
struct Activity {
  uint64_t seq;
  int32_t name_id;
  c10::DeviceIndex device;
  c10::StreamId stream;
  uint64_t correlation_id;
  int64_t sim_start_ns, sim_end_ns;   // simulated clock
  int64_t trace_start_ns;             // placement on the profiler's wall-clock axis
  int64_t host_wall_ns;               // when and on which thread the host launched it
  int32_t host_tid;
  std::vector<LaneSpan> lanes;
};

// Interns an op name; ids are stable for the process.
int32_t intern_op_name(const std::string& name);
const std::string& op_name(int32_t id);

void enqueue_op(OpDesc&& op);
// Per-thread switch: while off, enqueue_op drops ops instead of queueing them. A compiled
// graph runs its ops with charging off and is charged once, as one program.
// Work of known duration (an NKI kernel, a collective) issued while charging is off is not
// dropped: its nanoseconds accumulate per thread, and the compiled graph adds them to its launch.
void set_charging(bool on);
bool charging();
int64_t take_captured_ns();
void enqueue_record(const SimEventPtr& event, const c10::Stream& stream);
void enqueue_wait(const SimEventPtr& event, const c10::Stream& stream);

// Cost function: simulated ns per op, in the order given. `at_sync` is false when the
// drain only happens because the queue reached its length bound. The batch is shared, not
// copied: the cost function may keep it (the profiler does) and must not change it.
// If it throws c10::Error it failed on this batch: the batch is charged without its
// estimates (events still read recorded) and the error propagates. Any other exception
// (Python's KeyboardInterrupt) puts the batch back at the head of the queue, so the next
// sync charges it, and propagates unchanged.
using OpBatchPtr = std::shared_ptr<const std::vector<OpDesc>>;
using CostFn = std::function<std::vector<int64_t>(const OpBatchPtr& ops, bool at_sync)>;
void set_cost_function(CostFn fn);
// The cost function runs Python, so a drain needs the interpreter lock (GIL). Lock order,
// which makes a deadlock between threads impossible:
//   drain lock  ->  GIL  ->  leaf locks (queue, activity log, names, allocator, op policy)
// A thread never waits for the drain lock while holding the GIL: `wait_without` lets the GIL
// go for the wait (Python may switch threads inside the cost function at any bytecode, so
// a GIL holder waiting here would block the drainer forever). Leaf locks are held briefly
// and nothing waits for the GIL or the drain lock while holding one.
// `acquire` returns a scope object that holds the GIL (null when the interpreter is not
// running: the drain then skips the cost model); `wait_without` runs a wait with the GIL let go
// if this thread holds it, and takes it back before it returns, never in a destructor (see
// python/Interpreter.h).
using InterpreterLock = std::function<std::shared_ptr<void>()>;
using WaitWithoutInterpreter = std::function<void(const std::function<void()>& wait)>;
void set_interpreter_lock(InterpreterLock acquire, WaitWithoutInterpreter wait_without);

// NEURON_LAUNCH_BLOCKING: every op is a sync point (timed as soon as it is issued).
void set_launch_blocking(bool on);

// Simulated duration of an event record (advances its stream's clock before the stamp).
void set_event_record_ns(int64_t ns);

// Times everything queued so far. Safe to call from any thread, re-entrant calls are no-ops.
void drain(bool at_sync = true);

int64_t stream_clock_ns(const c10::Stream& stream);
// Latest clock over the device's streams. drain_first=false reads what is charged so far
// without a sync point (an observer must not change where AEE groups end).
int64_t device_clock_ns(c10::DeviceIndex device, bool drain_first = true);

// Profiler activity log.
void set_activity_logging(bool on);
bool activity_logging();
std::vector<Activity> take_activities();
// The cost model attaches engine lanes to an op while profiling (by the op's seq).
void record_lanes(uint64_t seq, std::vector<LaneSpan>&& lanes);
int32_t intern_lane_name(const std::string& name);
std::vector<std::string> lane_names();
void push_correlation_id(uint64_t id);
void pop_correlation_id();
uint64_t current_correlation_id();

}  // namespace neuron
