// What happens to an op on 'neuron': runs as a Neuron op (timed by the simulator),
// falls back to CPU with one warning (TorchNeuron's behaviour for ops it lacks), or is
// not implemented at all. Python fills the table from its op lists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace neuron {

enum class OpStatus : uint8_t { kNeuron = 0, kCpuFallback = 1, kNotImplemented = 2 };

void set_op_status(const std::string& name, OpStatus status);
OpStatus op_status(int32_t name_id);

// TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS: ops that exist on Neuron but fail
// there (e.g. on a dtype the engines lack) raise instead of running on CPU.
void set_fallback_only_for_unimplemented(bool on);
bool fallback_only_for_unimplemented();

// Names of ops that fell back to CPU so far (each warned once).
std::vector<std::string> fallback_op_names();
void clear_fallback_ops();
// Records a fallback; true the first time for this op (warn then).
bool record_fallback(int32_t name_id);

// A Python UserWarning attributed to the neuron backend (not to a C++ source file).
void warn_user(const std::string& message);

}  // namespace neuron
