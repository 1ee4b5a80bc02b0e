// The ops CUDA supports for more dtypes than CPU, and how 'neuron' runs them.
//
// The list comes from comparing each OpInfo's dtypesIfCUDA with its CPU dtypes in
// torch.testing._internal.common_methods_invocations (torch 2.13) and keeping the pairs
// whose CPU kernel raises "not implemented for"; tests/backend/test_cuda_dtype_coverage.py
// recomputes that comparison, so a new pair in a later torch shows up there. Ops whose
// only kernels are CUDA's (flash attention, _scaled_grouped_mm, LSTM cells) are not here.
// Not covered: half-precision FFTs. torch.fft's device-generic front end admits half only
// for CUDA and meta and raises "Unsupported dtype Half" before any kernel is dispatched.
#include "aten/DtypeWidening.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_map>

namespace neuron {

struct Widening {
  std::vector<c10::ScalarType> from;  // argument dtypes CUDA takes and the CPU kernel lacks
  c10::ScalarType compute;            // what the CPU kernel computes in instead
  bool results_back;                  // results return to the argument dtype (as on CUDA)
};

namespace {

using c10::ScalarType;

const std::vector<ScalarType> kIntegers = {ScalarType::Byte, ScalarType::Char, ScalarType::Short,
                                           ScalarType::Int, ScalarType::Long};
const std::vector<ScalarType> kHalves = {ScalarType::Half, ScalarType::BFloat16};

const std::unordered_map<std::string, Widening>& table() {
  // Integer counts below 2^53 are exact in double, and histc's bin of an integer value is
  // the same in double as in CUDA's integer arithmetic; the counts come back as integers.
  static const Widening integer_histc{kIntegers, ScalarType::Double, true};
  // |x| of a bool is x; uint8 holds it exactly.
  static const Widening bool_abs{{ScalarType::Bool}, ScalarType::Byte, true};
  // The trace of a bool matrix is an int64 count on CUDA, as the uint8 trace is.
  static const Widening bool_trace{{ScalarType::Bool}, ScalarType::Long, false};
  // CUDA accumulates half and bfloat16 in float and rounds once at the end: the same.
  static const Widening half_in_float{kHalves, ScalarType::Float, true};
  static const Widening fp16_in_float{{ScalarType::Half}, ScalarType::Float, true};
  static const std::unordered_map<std::string, Widening> rules = {
      {"aten::histc", integer_histc},
      {"aten::histc.out", integer_histc},
      {"aten::abs", bool_abs},
      {"aten::abs.out", bool_abs},
      {"aten::abs_", bool_abs},
      {"aten::trace", bool_trace},
      {"aten::avg_pool3d", half_in_float},
      {"aten::avg_pool3d.out", half_in_float},
      {"aten::avg_pool3d_backward", half_in_float},
      {"aten::avg_pool3d_backward.grad_input", half_in_float},
      {"aten::_upsample_bilinear2d_aa", half_in_float},
      {"aten::_upsample_bilinear2d_aa.out", half_in_float},
      {"aten::_upsample_bilinear2d_aa_backward", half_in_float},
      {"aten::_upsample_bilinear2d_aa_backward.grad_input", half_in_float},
      {"aten::multi_margin_loss", half_in_float},
      {"aten::multi_margin_loss.out", half_in_float},
      {"aten::multi_margin_loss_backward", half_in_float},
      {"aten::multi_margin_loss_backward.grad_input", half_in_float},
      {"aten::multilabel_margin_loss_forward", half_in_float},
      {"aten::multilabel_margin_loss_forward.output", half_in_float},
      {"aten::multilabel_margin_loss_backward", half_in_float},
      {"aten::multilabel_margin_loss_backward.grad_input", half_in_float},
      // The CPU kernel has bfloat16 but not float16.
      {"aten::rrelu_with_noise", fp16_in_float},
      {"aten::rrelu_with_noise.out", fp16_in_float},
      {"aten::rrelu_with_noise_", fp16_in_float},
      {"aten::rrelu_with_noise_functional", fp16_in_float},
  };
  return rules;
}

bool widens(const Widening& rule, const at::Tensor& t) {
  return t.defined() &&
         std::find(rule.from.begin(), rule.from.end(), t.scalar_type()) != rule.from.end();
}

}  // namespace

const Widening* widening_for(int32_t name_id, const std::string& name) {
  // Looked up once per op name and thread; the fallback's hot path pays one hash of an int.
  thread_local std::unordered_map<int32_t, const Widening*> cache;
  auto it = cache.find(name_id);
  if (it != cache.end()) return it->second;
  const auto& rules = table();
  auto rule = rules.find(name);
  const Widening* found = rule == rules.end() ? nullptr : &rule->second;
  cache.emplace(name_id, found);
  return found;
}

WidenedCall::WidenedCall(const Widening* rule, torch::jit::Stack* stack, size_t first,
                         size_t num_args)
    : rule_(rule) {
  if (rule == nullptr) return;
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& value = (*stack)[first + i];
    if (!value.isTensor()) continue;
    const at::Tensor t = value.toTensor();
    if (!widens(*rule, t)) continue;
    if (original_dtype_ == ScalarType::Undefined) original_dtype_ = t.scalar_type();
    at::Tensor widened = t.to(rule->compute);
    slots_.push_back({i, t, widened});
    value = widened;
  }
}

void WidenedCall::finish(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  if (!active()) return;
  const auto& arguments = schema.arguments();
  const auto& returns = schema.returns();
  // Arguments written by the kernel (out=, in-place, rrelu's noise) go back into the
  // caller's tensors, whether or not they are also returned.
  for (const Slot& slot : slots_) {
    const auto* alias = arguments[slot.arg].alias_info();
    if (!alias || !alias->isWrite() || slot.original.numel() == 0) continue;
    TORCH_CHECK(slot.original.sizes().equals(slot.widened.sizes()), schema.name(), ": argument '",
                arguments[slot.arg].name(), "' has shape ", slot.original.sizes(),
                " but the result has shape ", slot.widened.sizes(),
                "; pass a tensor of the result's shape or an empty one.");
    slot.original.copy_(slot.widened);
  }
  const size_t ret_first = stack->size() - returns.size();
  for (size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& value = (*stack)[ret_first + r];
    if (!value.isTensor()) continue;
    const at::Tensor result = value.toTensor();
    const auto* ret_alias = returns[r].alias_info();
    const Slot* written = nullptr;
    for (const Slot& slot : slots_) {
      const auto* arg_alias = arguments[slot.arg].alias_info();
      if (ret_alias && ret_alias->isWrite() && arg_alias && arg_alias->isWrite() &&
          arg_alias->beforeSets() == ret_alias->beforeSets()) {
        written = &slot;
      }
    }
    if (written != nullptr) {
      // An empty out= tensor was resized by the kernel: the fallback adopts this result.
      value = written->original.numel() == 0 ? result.to(written->original.scalar_type())
                                             : written->original;
    } else if (rule_->results_back && result.scalar_type() == rule_->compute) {
      value = result.to(original_dtype_);
    }
  }
}

}  // namespace neuron
