#include "runtime/NeuronAllocator.h"

#include "aten/TimeOnly.h"
#include "runtime/NeuronGuard.h"
#include "runtime/NeuronRuntime.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <sys/mman.h>

namespace neuron {

namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kAlignment = 64;

std::mutex g_mutex;
std::array<DeviceStats, kMaxDevices> g_stats;

Stat& aggregate(c10::CachingAllocator::StatArray& stats) {
  return stats[static_cast<size_t>(StatType::AGGREGATE)];
}

// What a device block remembers so its deleter can return the bytes to the stats.
struct Block {
  c10::DeviceIndex device;
  size_t nbytes;
  void* host_ptr;          // owned when adopted == nullptr
  c10::Storage adopted;    // the CPU storage whose memory this block wraps
  // Time-only mode: the memory is reserved address space (never written, so no host memory
  // is used) and the tensor's values are unknown until a copy fills the whole block.
  bool mapped = false;
  std::atomic<bool> has_values{true};
};

// Applies `fn(stats, counts_bytes)` to every statistic the allocator keeps for one device.
// Without a caching pool every block is its own segment, reserved exactly while allocated:
// a block adds its size to each byte statistic and one to each count.
template <typename Fn>
void for_each_stat(DeviceStats& s, Fn fn) {
  for (auto* bytes : {&s.allocated_bytes, &s.active_bytes, &s.requested_bytes,
                      &s.reserved_bytes}) {
    fn(*bytes, true);
  }
  for (auto* count : {&s.allocation, &s.active, &s.segment}) fn(*count, false);
}

void delete_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for_each_stat(g_stats[block->device], [block](auto& stats, bool counts_bytes) {
      aggregate(stats).decrease(counts_bytes ? block->nbytes : 1);
    });
  }
  if (block->mapped) {
    munmap(block->host_ptr, block->nbytes);
  } else if (block->host_ptr != nullptr) {
    std::free(block->host_ptr);
  }
  delete block;
}

// Raises torch.OutOfMemoryError (and counts it) if nbytes do not fit; the caller holds g_mutex.
// The text keeps the "(OOM)" marker TorchNeuron's allocator error carries.
void raise_if_over(c10::DeviceIndex device, size_t nbytes) {
  const int64_t capacity = config().hbm_bytes_per_device;
  const int64_t used = aggregate(g_stats[device].allocated_bytes).current;
  if (used + static_cast<int64_t>(nbytes) > capacity) {
    g_stats[device].num_ooms += 1;
    TORCH_CHECK_WITH(OutOfMemoryError, false,
                     "NRT allocation failed for size ", nbytes, " (OOM): neuron:",
                     static_cast<int>(device), " tried to allocate ", nbytes, " bytes with ",
                     capacity - used, " bytes free of ", capacity, " bytes of simulated HBM (",
                     config().instance_name, "). Free tensors you no longer need (del, then "
                     "torch.neuron.empty_cache()), use a smaller batch, or choose an instance "
                     "with more memory per core.");
  }
}

void reserve(c10::DeviceIndex device, size_t nbytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  raise_if_over(device, nbytes);
  for_each_stat(g_stats[device], [nbytes](auto& stats, bool counts_bytes) {
    aggregate(stats).increase(counts_bytes ? nbytes : 1);
  });
  note_memory_placed();
}

c10::DeviceIndex current_device_checked() {
  lazy_init();
  const c10::DeviceIndex device = current_device();
  check_device_index(device);
  check_device_owned(device);
  return device;
}

Block* block_of(const c10::Storage& storage) {
  const c10::DataPtr& ptr = storage.data_ptr();
  return ptr.get_deleter() == &delete_block ? static_cast<Block*>(ptr.get_context()) : nullptr;
}

}  // namespace

void check_fits(c10::DeviceIndex device, size_t nbytes) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  raise_if_over(device, nbytes);
}

c10::DataPtr NeuronAllocator::allocate(size_t nbytes) {
  const c10::DeviceIndex device = current_device_checked();
  const c10::Device dev(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &delete_block, dev);
  reserve(device, nbytes);
  auto* block = new Block{device, nbytes, nullptr, c10::Storage()};
  if (time_only()) {
    // Unique addresses (data_ptr comparisons keep working) without committing host memory.
    void* ptr = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ptr != MAP_FAILED) {
      block->host_ptr = ptr;
      block->mapped = true;
      block->has_values = false;
    }
  } else if (posix_memalign(&block->host_ptr, kAlignment, nbytes) != 0) {
    block->host_ptr = nullptr;
  }
  if (block->host_ptr == nullptr) {
    delete_block(block);  // gives the reservation back
    TORCH_CHECK_WITH(OutOfMemoryError, false, "Host memory backing neuron:",
                     static_cast<int>(device), " is exhausted allocating ", nbytes, " bytes.");
  }
  return c10::DataPtr(block->host_ptr, block, &delete_block, dev);
}

bool holds_values(const c10::Storage& storage) {
  const Block* block = block_of(storage);
  return block == nullptr || block->has_values.load(std::memory_order_relaxed);
}

void set_holds_values(const c10::Storage& storage, bool has_values) {
  if (Block* block = block_of(storage)) block->has_values = has_values;
}

c10::DataPtr NeuronAllocator::adopt(const c10::Storage& cpu_storage, c10::DeviceIndex device) {
  const size_t nbytes = cpu_storage.nbytes();
  void* ptr = const_cast<void*>(cpu_storage.data());
  const c10::Device dev(c10::DeviceType::PrivateUse1, device);
  reserve(device, nbytes);
  auto* block = new Block{device, nbytes, nullptr, cpu_storage};
  return c10::DataPtr(ptr, block, &delete_block, dev);
}

void NeuronAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

DeviceStats NeuronAllocator::getDeviceStats(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats[device];
}

void NeuronAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceStats& s = g_stats[device];
  for_each_stat(s, [](auto& stats, bool) {
    for (Stat& stat : stats) stat.reset_accumulated();
  });
  s.num_ooms = 0;
  s.num_alloc_retries = 0;
}

void NeuronAllocator::resetPeakStats(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  for_each_stat(g_stats[device], [](auto& stats, bool) {
    for (Stat& stat : stats) stat.reset_peak();
  });
}

std::pair<size_t, size_t> NeuronAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_mutex);
  const int64_t capacity = config().hbm_bytes_per_device;
  const int64_t used = aggregate(g_stats[device].allocated_bytes).current;
  return {static_cast<size_t>(capacity - used), static_cast<size_t>(capacity)};
}

NeuronAllocator* allocator() {
  static NeuronAllocator instance;
  return &instance;
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, allocator());

}  // namespace neuron
