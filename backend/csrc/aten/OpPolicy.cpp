#include "aten/OpPolicy.h"

#include "runtime/NeuronQueue.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <set>

namespace neuron {

namespace {
std::mutex g_mutex;
std::vector<OpStatus> g_status;  // by op name id
std::set<int32_t> g_fell_back;
std::atomic<bool> g_strict{false};
}  // namespace

void set_op_status(const std::string& name, OpStatus status) {
  const int32_t id = intern_op_name(name);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_status.size() <= static_cast<size_t>(id)) g_status.resize(id + 1, OpStatus::kNeuron);
  g_status[id] = status;
}

OpStatus op_status(int32_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<size_t>(id) < g_status.size() ? g_status[id] : OpStatus::kNeuron;
}

void set_fallback_only_for_unimplemented(bool on) { g_strict.store(on); }
bool fallback_only_for_unimplemented() { return g_strict.load(); }

std::vector<std::string> fallback_op_names() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> names;
  for (int32_t id : g_fell_back) names.push_back(op_name(id));
  return names;
}

void clear_fallback_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fell_back.clear();
}

bool record_fallback(int32_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_fell_back.insert(id).second;
}

void warn_user(const std::string& message) {
  c10::warn(c10::Warning(c10::UserWarning(), c10::SourceLocation{"neuron", "torch_neuronx", 0},
                         message, /*verbatim=*/true));
}

}  // namespace neuron
