// Scaled dot-product attention on 'neuron', PrivateUse1's way: _fused_sdp_choice picks the
// OVERRIDEABLE backend, whose forward and backward run CPU's fused (flash) kernels on the
// device tensors, so results equal CPU's and the simulator sees one attention op.
// Grouped-query attention (enable_gqa, K/V with fewer heads than Q) takes it too: CPU's flash
// kernels take K/V with H_kv heads (and sum dK/dV over each group), so the op is charged with
// the real K/V shapes, as Trainium's flash kernel reads them. Dropout takes the math path
// (composite, autograd-aware).
#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <torch/library.h>

#include <cmath>

namespace neuron {

namespace {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  // CPU's flash kernel needs one head size for Q, K and V (DeepSeek's MLA has a smaller V).
  bool plain = dropout_p == 0.0 && query.dim() == 4 && key.dim() == 4 && value.dim() == 4 &&
               !query.is_nested() && query.size(-1) == key.size(-1) &&
               query.size(-1) == value.size(-1) && key.size(1) == value.size(1);
  // Grouped-query: each K/V head serves a group of query heads (a divisor, with enable_gqa).
  if (plain && key.size(1) != query.size(1)) {
    plain = enable_gqa && key.size(1) > 0 && query.size(1) % key.size(1) == 0;
  }
  return static_cast<int64_t>(plain ? sdp::SDPBackend::overrideable : sdp::SDPBackend::math);
}

// [B, H_kv, S, D] -> [B, heads, S, D] as FP32, each K/V head repeated for its query heads.
at::Tensor float_heads(const at::Tensor& t, int64_t heads) {
  const int64_t kv = t.size(1);
  const at::Tensor f = t.to(at::kFloat);
  return kv == heads ? f : f.repeat_interleave(heads / kv, 1);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
attention_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                  const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                  bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "neuron attention (OVERRIDEABLE backend): dropout_p must be 0, "
              "got ", dropout_p, "; scaled_dot_product_attention takes the math path for dropout.");
  auto [out, logsumexp] = at::_scaled_dot_product_flash_attention_for_cpu(
      query, key, value, dropout_p, is_causal, attn_bias, scale);
  const auto empty = at::empty({0}, query.options());
  return {out, logsumexp, empty, empty, c10::SymInt(query.size(2)), c10::SymInt(key.size(2)),
          empty, empty, empty};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor&, const at::Tensor&,
    c10::SymInt, c10::SymInt, double dropout_p, bool is_causal, const at::Tensor&,
    const at::Tensor&, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "neuron attention backward: dropout_p must be 0, got ", dropout_p);
  const std::optional<at::Tensor> bias =
      attn_bias.defined() ? std::optional<at::Tensor>(attn_bias) : std::nullopt;
  at::Tensor grad_q, grad_k, grad_v, grad_bias;
  if (grad_input_mask[0] || grad_input_mask[1] || grad_input_mask[2]) {
    std::tie(grad_q, grad_k, grad_v) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, bias, scale);
  }
  if (grad_input_mask[3] && attn_bias.defined()) {
    // d(scores): P * (dP - rowsum(dO * O)), with P recomputed from the saved logsumexp.
    const double s =
        scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
    const int64_t heads = query.size(1);
    const at::Tensor k_t = float_heads(key, heads).transpose(-2, -1);
    at::Tensor scores = at::matmul(query.to(at::kFloat), k_t) * s + attn_bias.to(at::kFloat);
    if (is_causal) {
      const auto keep =
          at::ones({query.size(2), key.size(2)}, query.options().dtype(at::kBool)).tril();
      scores = scores.masked_fill(keep.logical_not(), -INFINITY);
    }
    const at::Tensor p = (scores - logsumexp.to(at::kFloat).unsqueeze(-1)).exp();
    const at::Tensor v_t = float_heads(value, heads).transpose(-2, -1);
    const at::Tensor dp = at::matmul(grad_out.to(at::kFloat), v_t);
    const at::Tensor row = (grad_out.to(at::kFloat) * out.to(at::kFloat)).sum(-1, true);
    at::Tensor ds = p * (dp - row);
    // Sum over the dimensions the bias was broadcast along.
    for (int64_t d = 0; d < ds.dim(); ++d) {
      const int64_t bd = d - (ds.dim() - attn_bias.dim());
      if (bd < 0 || (attn_bias.size(bd) == 1 && ds.size(d) != 1)) ds = ds.sum(d, true);
    }
    grad_bias = ds.reshape(attn_bias.sizes()).to(attn_bias.scalar_type());
  }
  return {grad_q, grad_k, grad_v, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", &fused_sdp_choice);
  m.impl("_scaled_dot_product_fused_attention_overrideable", &attention_forward);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", &attention_backward);
}

}  // namespace neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron::fused_sdp_choice)
}  // namespace at::native
