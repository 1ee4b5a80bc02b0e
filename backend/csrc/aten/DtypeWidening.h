// Ops that CUDA runs for more dtypes than their CPU kernel does (integer histc, bool abs,
// half avg_pool3d, ...). On 'neuron' they behave as on CUDA: the CPU fallback computes them
// in a dtype the CPU kernel supports and converts the results back exactly.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

namespace neuron {

struct Widening;

// The rule for this op, or nullptr (most ops).
const Widening* widening_for(int32_t name_id, const std::string& name);

// Converts the widened arguments of one call in place on the stack; undone by finish().
class WidenedCall {
 public:
  WidenedCall(const Widening* rule, torch::jit::Stack* stack, size_t first, size_t num_args);
  bool active() const { return !slots_.empty(); }
  // After the CPU kernel ran: results back to the caller's dtype, out/in-place arguments
  // written back into the caller's tensors.
  void finish(const c10::FunctionSchema& schema, torch::jit::Stack* stack);

 private:
  struct Slot {
    size_t arg;
    at::Tensor original;  // the CPU alias the caller's tensor maps to
    at::Tensor widened;   // its copy in the compute dtype, passed to the kernel
  };
  const Widening* rule_ = nullptr;
  std::vector<Slot> slots_;
  c10::ScalarType original_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace neuron
