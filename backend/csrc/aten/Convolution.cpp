// Convolution reaches a PrivateUse1 backend as convolution_overrideable (forward) and
// convolution_backward_overrideable, which have no CPU kernel for the fallback to call:
// run ATen's CPU convolution on aliases and adopt the results.
#include "aten/OpDescriptor.h"
#include "aten/TensorAlias.h"

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace neuron {

namespace {

std::vector<ArgDesc> conv_args(const at::Tensor& input, const at::Tensor& weight,
                               c10::IntArrayRef stride, c10::IntArrayRef padding,
                               c10::IntArrayRef dilation, int64_t groups) {
  return {describe_ivalue(input), describe_ivalue(weight), describe_ivalue(stride),
          describe_ivalue(padding), describe_ivalue(dilation), describe_ivalue(groups)};
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                       c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  c10::DeviceGuard guard(input.device());
  DeviceWorkScope device_work;
  std::optional<at::Tensor> cpu_bias;
  if (bias.has_value() && bias->defined()) cpu_bias = cpu_alias(*bias);
  at::Tensor out = at::convolution(cpu_alias(input), cpu_alias(weight), cpu_bias, stride, padding,
                                   dilation, transposed, output_padding, groups);
  at::Tensor result = adopt_cpu_tensor(out, input.device().index());
  charge("aten::convolution", input.device().index(),
         conv_args(input, weight, stride, padding, dilation, groups), {describe_tensor(result)});
  return result;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  c10::DeviceGuard guard(input.device());
  DeviceWorkScope device_work;
  const c10::DeviceIndex device = input.device().index();
  // The bias gradient needs only its size; the CPU kernel reads the channel count from it.
  std::optional<c10::IntArrayRef> bias_sizes;
  std::vector<int64_t> channels;
  if (output_mask[2]) {
    channels = {grad_output.size(1)};
    bias_sizes = channels;
  }
  auto [gi, gw, gb] = at::convolution_backward(
      cpu_alias(grad_output), cpu_alias(input), cpu_alias(weight), bias_sizes, stride, padding,
      dilation, transposed, output_padding, groups, output_mask);
  auto adopt = [device](const at::Tensor& t) {
    return t.defined() ? adopt_cpu_tensor(t, device) : t;
  };
  std::tuple<at::Tensor, at::Tensor, at::Tensor> result{adopt(gi), adopt(gw), adopt(gb)};
  std::vector<ArgDesc> args = conv_args(input, weight, stride, padding, dilation, groups);
  args.insert(args.begin(), describe_ivalue(grad_output));
  std::vector<TensorDesc> outputs;
  for (const at::Tensor* t : {&std::get<0>(result), &std::get<1>(result), &std::get<2>(result)}) {
    if (t->defined()) outputs.push_back(describe_tensor(*t));
  }
  charge("aten::convolution_backward", device, std::move(args), std::move(outputs));
  return result;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
}

}  // namespace neuron
