// Process-wide runtime state of the simulated Neuron device: how many logical
// NeuronCores this process sees, their simulated HBM capacity, and fork safety.
// Python (torch_neuronx) configures it from the chosen instance before first use.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace neuron {

// c10::DeviceIndex is int8_t, so a process can index at most 127 devices (TorchNeuron
// rejects more than 128 visible cores for the same reason).
constexpr int kMaxDevices = 127;

struct RuntimeConfig {
  c10::DeviceIndex device_count = 4;            // trn2.3xlarge at LNC=2
  int64_t hbm_bytes_per_device = 24LL << 30;    // one Trn2 HBM stack per LNC=2 core
  std::string instance_name = "trn2.3xlarge";
  bool host_cc_streams = false;  // NEURON_RT_ENABLE_HOST_CC: new streams are real streams
  // Set when the environment asked for an invalid instance: raised on first device use, so
  // `import torch` itself still works.
  std::string error;
  // Under torch.distributed each rank owns one index (its LOCAL_RANK); -1: all indices.
  c10::DeviceIndex owned_device = -1;
  std::string owner;             // who owns it, for error messages ("rank 1 (LOCAL_RANK 1)")
};

const RuntimeConfig& config();
// Replaces the configuration; refused once memory has been placed on a device.
void configure(const RuntimeConfig& cfg);

// Starts the runtime (first use of any device, or set_device, as CUDA's context); raises
// the TorchNeuron "use spawn" error in a child forked after the runtime started.
void lazy_init();
// What torch.neuron.is_initialized() reports (FakeTensorMode then uses the current device).
bool is_initialized();
// Set by the first device allocation: from then on the device configuration is fixed
// (the distributed backend checks it before taking its rank's core).
void note_memory_placed();
bool memory_placed();
// True in a child forked after the runtime started (it must not touch devices).
bool in_bad_fork();

// Raises a CUDA-like error for an index outside [0, device_count).
void check_device_index(c10::DeviceIndex index);
// Raises when this process places memory on an index another rank owns (distributed runs).
void check_device_owned(c10::DeviceIndex index);

}  // namespace neuron
