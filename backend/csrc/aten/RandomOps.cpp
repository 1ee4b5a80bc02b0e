#include "aten/RandomOps.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace neuron {

bool draws_from_global_generator(const std::string& name) {
  return name == "aten::native_dropout";
}

namespace {
// native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor), CPU's numerics:
// keep-mask ~ Bernoulli(1 - p), output = input * mask / (1 - p).
void native_dropout(torch::jit::Stack* stack, const at::Generator& gen) {
  const std::optional<bool> train = torch::jit::pop(*stack).toOptional<bool>();
  const double p = torch::jit::pop(*stack).toDouble();
  const at::Tensor input = torch::jit::pop(*stack).toTensor();
  at::Tensor output, mask;
  if (input.numel() == 0) {
    output = input.clone();
    mask = at::empty_like(input, input.options().dtype(at::kBool));
  } else if (!train.has_value() || *train) {
    const double keep = 1.0 - p;
    const double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
    mask = at::empty_like(input, input.options().dtype(at::kBool));
    mask.bernoulli_(keep, gen);
    output = input.mul(mask).mul_(scale);
  } else {
    output = input.clone();
    mask = at::ones_like(input, input.options().dtype(at::kBool));
  }
  torch::jit::push(*stack, std::move(output), std::move(mask));
}
}  // namespace

void run_random_op(const std::string& name, torch::jit::Stack* stack,
                   const at::Generator& cpu_gen) {
  TORCH_CHECK(name == "aten::native_dropout", "no neuron random kernel for ", name);
  native_dropout(stack, cpu_gen);
}

}  // namespace neuron
