// Random ops whose CPU kernel draws from the global CPU generator because their schema
// has no generator argument (native_dropout). On 'neuron' they draw from the device's
// generator like every other random op; these run them on CPU operands with it.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/stack.h>

#include <string>

namespace neuron {

// True for ops that must be run by run_random_op instead of their CPU kernel.
bool draws_from_global_generator(const std::string& name);
// Replaces the op's arguments on `stack` with its results, drawing from `cpu_gen`.
void run_random_op(const std::string& name, torch::jit::Stack* stack, const at::Generator& cpu_gen);

}  // namespace neuron
