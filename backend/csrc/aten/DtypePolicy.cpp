#include "aten/DtypePolicy.h"

#include "aten/OpPolicy.h"
#include "runtime/NeuronQueue.h"

#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace neuron {

namespace {

// By op name without overload. Data movement runs on the DMA engines, which copy bytes of
// any width; these never compute on a value.
const std::unordered_set<std::string>& movement_ops() {
  static const std::unordered_set<std::string> names{
      "aten::clone", "aten::_to_copy", "aten::copy", "aten::copy_", "aten::_copy_from",
      "aten::lift_fresh_copy", "aten::alias_copy", "aten::detach_copy", "aten::cat",
      "aten::stack", "aten::hstack", "aten::vstack", "aten::dstack", "aten::index_select",
      "aten::gather", "aten::take", "aten::take_along_dim", "aten::index", "aten::index_put",
      "aten::index_put_", "aten::_index_put_impl_", "aten::scatter", "aten::scatter_",
      "aten::masked_select", "aten::masked_scatter", "aten::masked_scatter_",
      "aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::narrow_copy",
      "aten::flip", "aten::roll", "aten::repeat", "aten::tile", "aten::constant_pad_nd",
      "aten::fill", "aten::fill_", "aten::zero_", "aten::full", "aten::full_like",
      "aten::zeros", "aten::zeros_like", "aten::ones", "aten::ones_like", "aten::new_full",
      "aten::new_zeros", "aten::new_ones", "aten::tril", "aten::triu", "aten::diag",
      "aten::diag_embed", "aten::diagonal_copy", "aten::unfold_copy", "aten::as_strided_copy",
      "aten::expand_copy", "aten::permute_copy", "aten::view_copy", "aten::t_copy",
      "aten::transpose_copy", "aten::squeeze_copy", "aten::unsqueeze_copy",
      "aten::select_copy", "aten::slice_copy", "aten::split_copy",
      "aten::split_with_sizes_copy", "aten::unbind_copy", "aten::contiguous",
      "aten::random_", "aten::random", "aten::randint", "aten::randint_like",
      "aten::randperm", "aten::_reshape_copy", "aten::reshape", "aten::flatten",
      "aten::movedim", "aten::unflatten", "aten::block_diag", "aten::select_scatter",
      "aten::slice_scatter", "aten::diagonal_scatter", "aten::as_strided_scatter"};
  return names;
}

std::mutex g_warned_mutex;
std::set<std::pair<int32_t, int>> g_warned;  // (op, dtype) already reported

bool warned(int32_t op, c10::ScalarType dtype) {
  std::lock_guard<std::mutex> lock(g_warned_mutex);
  return g_warned.count({op, static_cast<int>(dtype)}) != 0;
}

void warn_once(int32_t op, c10::ScalarType dtype) {
  {
    std::lock_guard<std::mutex> lock(g_warned_mutex);
    if (!g_warned.insert({op, static_cast<int>(dtype)}).second) return;
  }
  const bool is_float = dtype == c10::ScalarType::Double;
  warn_user(std::string("[Neuron] ") + op_name(op) + " on " +
            (is_float ? "torch.float64" : "torch.int64") +
            ": Trainium computes " + (is_float ? "float64" : "int64") + " ops in 32 bits (" +
            (is_float ? "float32" : "int32") + "), and a result did not fit: " +
            (is_float ? "it was rounded to float32 precision"
                      : "it was outside the int32 range and wrapped around") +
            ", as on hardware. Storage and copies keep 64-bit values; compute on the CPU "
            "where the exact 64-bit result matters.");
}

// True for ops that only move or select data (or generate random integers): their 64-bit
// results are stored exactly. The decision per op is cached on each thread (names are
// interned for the process).
bool keeps_64_bits(int32_t op_name_id) {
  thread_local std::unordered_map<int32_t, bool> cache;
  auto it = cache.find(op_name_id);
  if (it != cache.end()) return it->second;
  std::string name = op_name(op_name_id);
  const size_t dot = name.find('.');
  // scatter.reduce / scatter.value_reduce combine values: they compute.
  const bool reduces = dot != std::string::npos && name.find("reduce", dot) != std::string::npos;
  if (dot != std::string::npos) name.resize(dot);
  const bool keeps = !reduces && movement_ops().count(name) != 0;
  cache.emplace(op_name_id, keeps);
  return keeps;
}

}  // namespace

void apply_dtype_policy(const at::Tensor& cpu, int32_t op_name_id) {
  const c10::ScalarType dtype = cpu.scalar_type();
  c10::ScalarType narrow;
  switch (dtype) {
    case c10::ScalarType::Double: narrow = c10::ScalarType::Float; break;
    case c10::ScalarType::Long: narrow = c10::ScalarType::Int; break;
    default: return;
  }
  if (cpu.numel() == 0 || cpu.is_meta() || keeps_64_bits(op_name_id)) return;
  const at::Tensor rounded = cpu.to(narrow).to(dtype);
  // Compared until the first report for this op and dtype, then skipped.
  if (!warned(op_name_id, dtype)) {
    const bool same = dtype == c10::ScalarType::Double
                          ? rounded.eq(cpu).logical_or(cpu.isnan()).all().item<bool>()
                          : rounded.equal(cpu);
    if (!same) warn_once(op_name_id, dtype);
  }
  cpu.copy_(rounded);
}

}  // namespace neuron
