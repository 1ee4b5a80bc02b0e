#include "runtime/NeuronRuntime.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <pthread.h>

namespace neuron {

namespace {
RuntimeConfig g_config;
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_memory_placed{false};
std::atomic<bool> g_forked_after_init{false};

void mark_forked_child() {
  if (g_initialized.load()) g_forked_after_init.store(true);
}

struct ForkHandlerRegistration {
  ForkHandlerRegistration() { pthread_atfork(nullptr, nullptr, &mark_forked_child); }
} g_fork_handler;
}  // namespace

const RuntimeConfig& config() { return g_config; }

void configure(const RuntimeConfig& cfg) {
  TORCH_CHECK(!g_memory_placed.load(),
              "The simulated Neuron runtime is already initialized with ", g_config.instance_name,
              " (", static_cast<int>(g_config.device_count), " devices); choose the instance "
              "before the first tensor is placed on 'neuron' (NEURON_SIM_INSTANCE or "
              "torch_neuronx.set_instance at the top of the script).");
  g_config = cfg;
}

void lazy_init() {
  TORCH_CHECK(g_config.error.empty(), g_config.error);
  if (C10_UNLIKELY(g_forked_after_init.load())) {
    TORCH_CHECK(false,
                "Cannot re-initialize Neuron runtime in forked subprocess. To use Neuron with "
                "multiprocessing, you must use the 'spawn' start method");
  }
  g_initialized.store(true, std::memory_order_relaxed);
}

bool is_initialized() { return g_initialized.load(); }

void note_memory_placed() {
  if (C10_UNLIKELY(!g_memory_placed.load(std::memory_order_relaxed))) g_memory_placed.store(true);
}

bool memory_placed() { return g_memory_placed.load(); }

bool in_bad_fork() { return g_forked_after_init.load(); }

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < g_config.device_count,
              "Neuron error: invalid device ordinal: neuron:", static_cast<int>(index),
              " does not exist; this process sees ", static_cast<int>(g_config.device_count),
              " neuron device(s) (", g_config.instance_name,
              "). Use an index in [0, ", static_cast<int>(g_config.device_count), ").");
}

void check_device_owned(c10::DeviceIndex index) {
  const c10::DeviceIndex owned = g_config.owned_device;
  TORCH_CHECK(owned < 0 || index == owned,
              "Neuron error: neuron:", static_cast<int>(index), " belongs to another rank. Under "
              "torch.distributed each process owns one logical NeuronCore, and this process (",
              g_config.owner, ") owns neuron:", static_cast<int>(owned), ". Put its tensors on "
              "torch.device('neuron', int(os.environ['LOCAL_RANK'])) or plain 'neuron'.");
}

}  // namespace neuron
