#include "runtime/NeuronQueue.h"

#include "runtime/NeuronRuntime.h"
#include "runtime/NeuronStream.h"
#include "runtime/OpKeys.h"

#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace neuron {

namespace {

// Long queues are timed early so memory stays bounded; the timing is unchanged.
constexpr size_t kMaxQueuedOps = 4096;

struct QueueItem {
  enum Kind : uint8_t { kOp, kRecord, kWait } kind;
  c10::DeviceIndex device;
  c10::StreamId stream;
  size_t op_index;     // into the op batch, for kOp
  SimEventPtr event;   // for kRecord / kWait
};

struct Queue {
  std::vector<QueueItem> items;
  // Shared with the cost function, which may keep a drained batch (the profiler does).
  std::shared_ptr<std::vector<OpDesc>> ops = std::make_shared<std::vector<OpDesc>>();
};

// Lock order (see set_interpreter_lock in the header): g_drain_mutex -> GIL -> leaf locks
// (g_queue_mutex, g_activity_mutex, g_names_mutex). Lock g_drain_mutex only through
// DrainLock, which never waits for it while holding the GIL.
std::mutex g_queue_mutex;     // leaf; guards g_queue
Queue g_queue;
std::mutex g_drain_mutex;     // one drain at a time, clocks belong to it
std::array<std::array<int64_t, kStreamSlots>, kMaxDevices> g_clock_ns{};
std::array<std::array<int64_t, kStreamSlots>, kMaxDevices> g_trace_end_ns{};
CostFn g_cost_fn;
InterpreterLock g_interpreter_lock;
WaitWithoutInterpreter g_wait_without_interpreter;
std::atomic<uint64_t> g_next_seq{1};
std::atomic<bool> g_launch_blocking{false};
std::atomic<int64_t> g_event_record_ns{0};
thread_local bool t_draining = false;
thread_local bool t_charging = true;
thread_local int64_t t_captured_ns = 0;

std::mutex g_names_mutex;
// A deque: op_name() hands out references that must survive later interning.
std::deque<std::string> g_names{"<unknown>"};
std::unordered_map<std::string, int32_t> g_name_ids;

std::atomic<bool> g_logging{false};
std::mutex g_activity_mutex;  // leaf; guards g_activities, g_pending_lanes, g_lane_names
std::vector<Activity> g_activities;
std::unordered_map<uint64_t, std::vector<LaneSpan>> g_pending_lanes;
std::vector<std::string> g_lane_names;
thread_local std::vector<uint64_t> t_correlation_ids;

// Holds g_drain_mutex. If it is taken, the GIL is let go for the wait (when this thread
// holds it) and taken back once the mutex is ours: drain lock -> GIL, the lock order.
class DrainLock {
 public:
  DrainLock() : lock_(g_drain_mutex, std::try_to_lock) {
    if (lock_.owns_lock()) return;
    auto wait = [this] { lock_.lock(); };
    if (g_wait_without_interpreter) {
      g_wait_without_interpreter(wait);
    } else {
      wait();
    }
  }
  DrainLock(const DrainLock&) = delete;
  DrainLock& operator=(const DrainLock&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
};

size_t stream_slot(c10::StreamId id) {
  return std::min<size_t>(static_cast<size_t>(id), kStreamSlots - 1);
}

void push_item(QueueItem&& item, OpDesc* op) {
  bool full = false;
  {
    std::lock_guard<std::mutex> lock(g_queue_mutex);
    if (op != nullptr) {
      item.op_index = g_queue.ops->size();
      g_queue.ops->push_back(std::move(*op));
    }
    g_queue.items.push_back(std::move(item));
    full = g_queue.ops->size() >= kMaxQueuedOps;
  }
  if (g_launch_blocking.load(std::memory_order_relaxed)) {
    drain(/*at_sync=*/true);
  } else if (full) {
    drain(/*at_sync=*/false);
  }
}

}  // namespace

int32_t intern_op_name(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_names_mutex);
  auto it = g_name_ids.find(name);
  if (it != g_name_ids.end()) return it->second;
  const auto id = static_cast<int32_t>(g_names.size());
  g_names.push_back(name);
  g_name_ids.emplace(name, id);
  return id;
}

const std::string& op_name(int32_t id) {
  std::lock_guard<std::mutex> lock(g_names_mutex);
  return g_names.at(static_cast<size_t>(id));
}

void set_charging(bool on) { t_charging = on; }
bool charging() { return t_charging; }

int64_t take_captured_ns() {
  const int64_t ns = t_captured_ns;
  t_captured_ns = 0;
  return ns;
}

void enqueue_op(OpDesc&& op) {
  if (!t_charging) {
    if (op.preset_ns > 0) t_captured_ns += op.preset_ns;
    return;
  }
  op.seq = g_next_seq++;
  // Keyed here, on the issuing thread, so a drain of repeated ops is lookups by key.
  if (op.preset_ns < 0) op.key = intern_op_key(op);
  if (g_logging.load(std::memory_order_relaxed)) {
    op.correlation_id = current_correlation_id();
    op.host_wall_ns = c10::getTime();
    op.host_tid = static_cast<int32_t>(::syscall(SYS_gettid));  // the tid torch.profiler shows
  }
  push_item(QueueItem{QueueItem::kOp, op.device, op.stream, 0, nullptr}, &op);
}

void enqueue_record(const SimEventPtr& event, const c10::Stream& stream) {
  event->device = stream.device_index();
  push_item(QueueItem{QueueItem::kRecord, stream.device_index(), stream.id(), 0, event}, nullptr);
}

void enqueue_wait(const SimEventPtr& event, const c10::Stream& stream) {
  push_item(QueueItem{QueueItem::kWait, stream.device_index(), stream.id(), 0, event}, nullptr);
}

void set_launch_blocking(bool on) { g_launch_blocking.store(on); }

void set_event_record_ns(int64_t ns) { g_event_record_ns.store(ns); }

void set_cost_function(CostFn fn) {
  DrainLock lock;
  g_cost_fn = std::move(fn);
}

void set_interpreter_lock(InterpreterLock acquire, WaitWithoutInterpreter wait_without) {
  g_interpreter_lock = std::move(acquire);
  g_wait_without_interpreter = std::move(wait_without);
}

namespace {

// A batch whose timing was interrupted goes back in front of what was queued since.
void requeue_at_head(Queue&& batch) {
  // The interrupted cost function may still hold the batch (its traceback does): copy it then.
  if (batch.ops.use_count() > 1) batch.ops = std::make_shared<std::vector<OpDesc>>(*batch.ops);
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  const size_t shift = batch.ops->size();
  for (QueueItem& item : g_queue.items) {
    if (item.kind == QueueItem::kOp) item.op_index += shift;
  }
  batch.items.insert(batch.items.end(), std::make_move_iterator(g_queue.items.begin()),
                     std::make_move_iterator(g_queue.items.end()));
  batch.ops->insert(batch.ops->end(), std::make_move_iterator(g_queue.ops->begin()),
                    std::make_move_iterator(g_queue.ops->end()));
  g_queue = std::move(batch);
}

// Advances the stream clocks over a timed batch, stamps its events and logs its activity.
// Called with g_drain_mutex held.
void charge_batch(const Queue& batch, std::vector<int64_t> durations) {
  durations.resize(batch.ops->size(), 0);

  const bool logging = g_logging.load();
  std::vector<Activity> activities;
  for (const QueueItem& item : batch.items) {
    int64_t& clock = g_clock_ns[item.device][stream_slot(item.stream)];
    switch (item.kind) {
      case QueueItem::kOp: {
        const OpDesc& op = (*batch.ops)[item.op_index];
        const int64_t start = clock;
        const int64_t ns = op.preset_ns >= 0 ? op.preset_ns : durations[item.op_index];
        clock += std::max<int64_t>(ns, 0);
        if (logging && op.host_wall_ns != 0) {
          // On the trace's wall-clock axis an op starts once the host issued it and
          // the stream finished its previous op, and lasts its simulated duration.
          int64_t& trace_end = g_trace_end_ns[item.device][stream_slot(item.stream)];
          const int64_t trace_start = std::max(op.host_wall_ns, trace_end);
          trace_end = trace_start + (clock - start);
          activities.push_back(Activity{op.seq, op.name_id, op.device, op.stream,
                                        op.correlation_id, start, clock, trace_start,
                                        op.host_wall_ns, op.host_tid, {}});
        }
        break;
      }
      case QueueItem::kRecord:
        // The record itself is a semaphore write on the stream: it takes time too.
        clock += g_event_record_ns.load(std::memory_order_relaxed);
        item.event->time_ns = clock;
        break;
      case QueueItem::kWait:
        if (item.event->time_ns >= 0) clock = std::max(clock, item.event->time_ns);
        break;
    }
  }
  if (!activities.empty()) {
    std::lock_guard<std::mutex> lock(g_activity_mutex);
    for (Activity& a : activities) {
      auto it = g_pending_lanes.find(a.seq);
      if (it == g_pending_lanes.end()) continue;
      a.lanes = std::move(it->second);
      g_pending_lanes.erase(it);
    }
    g_activities.insert(g_activities.end(), activities.begin(), activities.end());
  }
}

}  // namespace

void drain(bool at_sync) {
  if (t_draining) return;  // the cost function itself must not re-enter
  t_draining = true;
  struct Reset { ~Reset() { t_draining = false; } } reset;

  DrainLock drain_lock;
  Queue batch;
  {
    std::lock_guard<std::mutex> lock(g_queue_mutex);
    std::swap(batch, g_queue);
  }
  if (batch.items.empty()) return;

  std::vector<int64_t> durations;
  if (g_cost_fn && !batch.ops->empty()) {
    // The GIL is taken after the drain lock and let go before the clocks advance.
    std::shared_ptr<void> interpreter = g_interpreter_lock ? g_interpreter_lock() : nullptr;
    if (!g_interpreter_lock || interpreter != nullptr) {
      try {
        durations = g_cost_fn(batch.ops, at_sync);
      } catch (const c10::Error&) {
        charge_batch(batch, {});
        throw;
      } catch (...) {
        requeue_at_head(std::move(batch));
        throw;
      }
    }
  }
  charge_batch(batch, std::move(durations));
}

int64_t stream_clock_ns(const c10::Stream& stream) {
  drain();
  DrainLock lock;
  return g_clock_ns[stream.device_index()][stream_slot(stream.id())];
}

int64_t device_clock_ns(c10::DeviceIndex device, bool drain_first) {
  if (drain_first) drain();
  DrainLock lock;
  const auto& clocks = g_clock_ns[device];
  return *std::max_element(clocks.begin(), clocks.end());
}

void set_activity_logging(bool on) {
  drain();
  g_logging.store(on);
}

bool activity_logging() { return g_logging.load(); }

std::vector<Activity> take_activities() {
  drain();
  std::lock_guard<std::mutex> lock(g_activity_mutex);
  std::vector<Activity> out;
  std::swap(out, g_activities);
  g_pending_lanes.clear();
  return out;
}

void record_lanes(uint64_t seq, std::vector<LaneSpan>&& lanes) {
  std::lock_guard<std::mutex> lock(g_activity_mutex);
  g_pending_lanes[seq] = std::move(lanes);
}

int32_t intern_lane_name(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_activity_mutex);
  for (size_t i = 0; i < g_lane_names.size(); ++i) {
    if (g_lane_names[i] == name) return static_cast<int32_t>(i);
  }
  g_lane_names.push_back(name);
  return static_cast<int32_t>(g_lane_names.size() - 1);
}

std::vector<std::string> lane_names() {
  std::lock_guard<std::mutex> lock(g_activity_mutex);
  return g_lane_names;
}

void push_correlation_id(uint64_t id) { t_correlation_ids.push_back(id); }

void pop_correlation_id() {
  if (!t_correlation_ids.empty()) t_correlation_ids.pop_back();
}

uint64_t current_correlation_id() {
  return t_correlation_ids.empty() ? 0 : t_correlation_ids.back();
}

}  // namespace neuron
