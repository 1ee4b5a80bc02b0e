// torch.autocast(device_type="neuron"): the CUDA op lists, as TorchNeuron uses them. Each
// registration also records (op, policy) in autocast_ops(), the profiler's bf16 advice's list.
#include "aten/Autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace neuron {

namespace {

std::vector<std::pair<std::string, std::string>>& listed() {
  static std::vector<std::pair<std::string, std::string>> ops;
  return ops;
}

// `op` as the list macros spell it: "exp", "pow, Tensor_Scalar" or "norm.Scalar".
void list(std::string op, const char* policy) {
  auto comma = op.find(", ");
  if (comma != std::string::npos) op.replace(comma, 2, ".");
  listed().emplace_back("aten::" + op, policy);
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& autocast_ops() { return listed(); }

}  // namespace neuron

namespace {

using at::IntArrayRef;  // the names norm's signatures use, unqualified
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// Binary cross-entropy is unsafe to autocast; refuse it with the CUDA message.
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                   int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\nMany models use a sigmoid layer right before the binary cross entropy "
              "layer.\nIn this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\nor torch.nn.BCEWithLogitsLoss."
              "  binary_cross_entropy_with_logits and BCEWithLogits are\nsafe to autocast.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define NEURON_KERNEL(POLICY, ...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, POLICY) neuron::list(#__VA_ARGS__, #POLICY);
#define NEURON_LOWER_PRECISION(...) NEURON_KERNEL(lower_precision_fp, __VA_ARGS__)
#define NEURON_FP32(...) NEURON_KERNEL(fp32, __VA_ARGS__)
#define NEURON_FP32_SET_OPT_DTYPE(...) NEURON_KERNEL(fp32_set_opt_dtype, __VA_ARGS__)
#define NEURON_PROMOTE(...) NEURON_KERNEL(promote, __VA_ARGS__)
#define NEURON_FP32_APPEND_DTYPE(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY)                 \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FUNC, NAME, SIGNATURE, REDISPATCH, \
                                                      POLICY)                            \
  neuron::list(NAME, #POLICY);
  AT_FORALL_LOWER_PRECISION_FP(NEURON_LOWER_PRECISION)
  AT_FORALL_FP32(NEURON_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_FP32_SET_OPT_DTYPE)
  AT_FORALL_PROMOTE(NEURON_PROMOTE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(NEURON_FP32_APPEND_DTYPE)  // norm, as CUDA
#undef NEURON_KERNEL
#undef NEURON_LOWER_PRECISION
#undef NEURON_FP32
#undef NEURON_FP32_SET_OPT_DTYPE
#undef NEURON_PROMOTE
#undef NEURON_FP32_APPEND_DTYPE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(binary_cross_entropy_banned));
  neuron::list("binary_cross_entropy", "banned");
}
