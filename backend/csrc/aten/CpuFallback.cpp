// The boxed fallback: every ATen op without an explicit 'neuron' kernel runs its CPU
// kernel on zero-copy CPU aliases of device memory, its results are mapped back to
// device tensors, and its descriptor is queued for the simulator.
#include "aten/CpuFallback.h"
#include "aten/DeviceMemoryCheck.h"
#include "aten/DtypePolicy.h"
#include "aten/DtypeWidening.h"
#include "aten/OpDescriptor.h"
#include "aten/OpPolicy.h"
#include "aten/RandomOps.h"
#include "aten/TensorAlias.h"
#include "aten/TimeOnly.h"
#include "runtime/NeuronAllocator.h"
#include "runtime/NeuronGenerator.h"
#include "runtime/NeuronGuard.h"
#include "runtime/NeuronRuntime.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/accumulate.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/library.h>

#include <optional>
#include <unordered_map>

namespace neuron {

namespace {

struct ArgumentMap {
  std::vector<at::Tensor> neuron_tensors;  // originals, to map results back
  std::vector<at::Tensor> cpu_aliases;     // parallel to neuron_tensors
  c10::DeviceIndex device = -1;
  c10::DeviceIndex tensor_device = -1;  // of the first neuron tensor argument
  bool has_complex = false;
};

int32_t name_id_of(const c10::OperatorHandle& op) {
  // Interning takes a lock; each thread remembers the ids of the schemas it has seen.
  thread_local std::unordered_map<const c10::FunctionSchema*, int32_t> ids;
  const c10::FunctionSchema* schema = &op.schema();
  auto it = ids.find(schema);
  if (it != ids.end()) return it->second;
  const int32_t id = intern_op_name(c10::toString(op.operator_name()));
  ids.emplace(schema, id);
  return id;
}

at::Tensor to_cpu_operand(const at::Tensor& t, size_t arg_index, const std::string& op,
                          ArgumentMap& map) {
  if (!t.defined()) return t;
  if (on_neuron(t)) {
    const c10::DeviceIndex index = t.device().index();
    if (map.tensor_device < 0) map.tensor_device = index;
    // As on CUDA: one op, one device (copies between devices go through copy_).
    TORCH_CHECK(index == map.tensor_device,
                "Expected all tensors to be on the same device, but found at least two devices, "
                "neuron:", static_cast<int>(map.tensor_device), " and neuron:",
                static_cast<int>(index), "! (", op, ")");
    if (map.device < 0) map.device = index;
    if (c10::isComplexType(t.scalar_type())) map.has_complex = true;
    check_has_values(t, op);
    // Arguments over one device storage share one CPU storage, so the CPU kernel's overlap
    // checks (copy_ of overlapping slices, out= aliasing an input) see what CPU would see.
    const at::Tensor* sibling = nullptr;
    for (size_t i = 0; i < map.neuron_tensors.size() && sibling == nullptr; ++i) {
      if (map.neuron_tensors[i].storage().is_alias_of(t.storage())) sibling = &map.cpu_aliases[i];
    }
    at::Tensor alias = sibling != nullptr ? cpu_alias_sharing(t, *sibling) : cpu_alias(t);
    map.neuron_tensors.push_back(t);
    map.cpu_aliases.push_back(alias);
    return alias;
  }
  TORCH_CHECK(t.dim() == 0 || t.device().type() != c10::DeviceType::CPU,
              "Non-scalar tensor arg", arg_index, " is on cpu device, expected neuron (", op,
              "). Move it with .to('neuron') first; only 0-dim CPU tensors may be mixed in.");
  return t;
}

// The neuron tensor whose memory a CPU result lives in, if any.
const at::Tensor* aliased_input(const at::Tensor& cpu_result, const ArgumentMap& map) {
  if (!cpu_result.defined() || !cpu_result.has_storage()) return nullptr;
  // Time-only: a view of an input shares its Meta storage (which has no data).
  const bool meta = cpu_result.is_meta();
  const void* data = meta ? nullptr : cpu_result.storage().data();
  if (!meta && data == nullptr) return nullptr;
  for (size_t i = 0; i < map.cpu_aliases.size(); ++i) {
    const c10::Storage& alias = map.cpu_aliases[i].storage();
    if (meta ? alias.is_alias_of(cpu_result.storage()) : alias.data() == data) {
      return &map.neuron_tensors[i];
    }
  }
  return nullptr;
}

at::Tensor to_neuron_result(const at::Tensor& cpu_result, const ArgumentMap& map, int32_t id) {
  if (!cpu_result.defined() || on_neuron(cpu_result)) return cpu_result;
  if (const at::Tensor* input = aliased_input(cpu_result, map)) {
    return neuron_view(input->storage(), cpu_result);
  }
  apply_dtype_policy(cpu_result, id);
  return adopt_cpu_tensor(cpu_result, map.device);
}

// Where the kernels that compute an op run: CPU, or Meta (shapes only) in time-only mode.
c10::DeviceType kernel_device() {
  return time_only() ? c10::DeviceType::Meta : c10::DeviceType::CPU;
}

// Whether a kernel's output argument still lies over the device tensor passed for it.
bool same_memory(const at::Tensor& kernel_out, const at::Tensor& device_out,
                 const ArgumentMap& map) {
  if (!kernel_out.is_meta()) return kernel_out.storage().data() == device_out.storage().data();
  const at::Tensor* input = aliased_input(kernel_out, map);
  return input != nullptr && input->storage().is_alias_of(device_out.storage());
}

// Time-only: the op's Meta kernel gives its results' shapes. An op without one, or whose
// output shape depends on values (nonzero, unique, masked_select), cannot run without values.
void run_meta_kernel(const c10::OperatorHandle& op, const std::string& name,
                     torch::jit::Stack* stack) {
  auto fail = [&name](const std::string& why) {
    raise_needs_values(name, "its output shape cannot be known without them (Meta kernel: " +
                                 why + "). Run this op outside torch_neuronx.time_only(), or "
                                 "give the model a value-free path (e.g. a fixed MoE routing).");
  };
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
  } catch (const c10::Error& e) {
    fail(e.what_without_backtrace());
  } catch (python_error& e) {   // Meta kernels written in Python (torch._meta_registrations)
    fail(python_error_text(e));
  } catch (pybind11::error_already_set& e) {
    fail(python_error_text(e));
  }
}

void fail_or_warn_fallback(int32_t id, const std::string& name, const ArgumentMap& map) {
  const OpStatus status = op_status(id);
  if (status == OpStatus::kNotImplemented) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "Operation ", name, " is not implemented for Neuron");
  }
  bool falls_back = status == OpStatus::kCpuFallback;
  if (map.has_complex) {
    // The NeuronCore engines have no complex arithmetic: the Neuron op fails.
    TORCH_CHECK(!fallback_only_for_unimplemented(),
                "CPU fallback disabled because "
                "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1. Operation ", name,
                " failed on Neuron: complex dtypes are not supported by the NeuronCore "
                "engines. Unset the variable to run it on CPU, or use real tensors.");
    falls_back = true;
  }
  if (falls_back && record_fallback(id)) {
    warn_user("[Neuron] [WARNING] Operator '" + name + "' fell back to CPU");
  }
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t num_args = arguments.size();
  const size_t first = stack->size() - num_args;
  const int32_t id = name_id_of(op);
  const std::string& name = op_name(id);
  DeviceWorkScope device_work;

  ArgumentMap map;
  std::vector<ArgDesc> described;
  described.reserve(num_args);
  // Out arguments too small to hold the result get a CPU temporary that is adopted.
  std::vector<std::pair<size_t, at::Tensor>> resized_outs;
  // The device tensors passed for mutable arguments, returned as themselves.
  std::vector<at::Tensor> mutable_args(num_args);
  bool has_generator_arg = false;
  size_t generator_slot = 0;
  std::optional<OpRandomness> rng;  // a random op's draw from a neuron generator

  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& value = (*stack)[first + i];
    described.push_back(describe_ivalue(value));
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      const auto* alias_info = arguments[i].alias_info();
      const bool written = alias_info && alias_info->isWrite();
      if (written) mutable_args[i] = t;
      if (written && arguments[i].kwarg_only() && on_neuron(t) && t.numel() == 0) {
        if (map.device < 0) map.device = t.device().index();
        resized_outs.emplace_back(i, t);
        value = at::empty({0}, t.options().device(kernel_device()));
        continue;
      }
      value = to_cpu_operand(t, i, name, map);
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) list[j] = to_cpu_operand(list[j], i, name, map);
    } else if (value.isOptionalTensorList()) {
      auto list = value.toOptionalTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        std::optional<at::Tensor> e = list[j];
        if (e.has_value()) list[j] = to_cpu_operand(*e, i, name, map);
      }
    } else if (value.isDevice()) {
      const c10::Device d = value.toDevice();
      if (d.type() == c10::DeviceType::PrivateUse1) {
        if (map.device < 0 && d.has_index()) map.device = d.index();
        value = c10::IValue(c10::Device(kernel_device()));
      }
    } else if (value.isGenerator()) {
      const at::Generator& gen = value.toGenerator();
      if (gen.device().type() == c10::DeviceType::PrivateUse1) {
        rng.emplace(gen);
        value = rng->cpu();
      }
    } else if (value.isNone() && arguments[i].type()->kind() == c10::TypeKind::OptionalType &&
               arguments[i].type()->castRaw<c10::OptionalType>()->getElementType()->kind() ==
                   c10::TypeKind::GeneratorType) {
      has_generator_arg = true;
      generator_slot = first + i;
    }
  }
  if (map.device < 0) map.device = current_device();
  lazy_init();
  check_device_index(map.device);
  fail_or_warn_fallback(id, name, map);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, map.device));
  if (has_generator_arg) {
    // Ops that would use the CPU default generator use this device's own stream.
    rng.emplace(default_generator(map.device));
    (*stack)[generator_slot] = rng->cpu();
  }

  // Dtypes CUDA takes and this op's CPU kernel lacks are computed in one it has.
  WidenedCall widened(widening_for(id, name), stack, first, num_args);
  {
    DeviceMemoryScope device_memory(map.device);
    if (time_only()) {
      run_meta_kernel(op, name, stack);
    } else if (draws_from_global_generator(name)) {
      // Its CPU kernel would use the global CPU generator: run it with this device's.
      rng.emplace(default_generator(map.device));
      run_random_op(name, stack, rng->cpu());
    } else {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    }
  }
  widened.finish(schema, stack);
  if (time_only()) {
    // What the op wrote holds no values any more (it was not computed).
    for (const at::Tensor& t : mutable_args) {
      if (on_neuron(t)) set_holds_values(t.storage(), false);
    }
  }

  // Map results: mutable returns are their arguments; others are views or adopted.
  const auto& returns = schema.returns();
  const size_t num_returns = returns.size();
  const size_t ret_first = stack->size() - num_returns;
  std::vector<TensorDesc> outputs;
  for (size_t r = 0; r < num_returns; ++r) {
    c10::IValue& value = (*stack)[ret_first + r];
    const auto* ret_alias = returns[r].alias_info();
    if (ret_alias && ret_alias->isWrite() && value.isTensor()) {
      // Find the argument this return aliases.
      for (size_t i = 0; i < num_args; ++i) {
        const auto* arg_alias = arguments[i].alias_info();
        if (arg_alias && arg_alias->isWrite() &&
            arg_alias->beforeSets() == ret_alias->beforeSets()) {
          const at::Tensor cpu_out = value.toTensor();
          apply_dtype_policy(cpu_out, id);
          value = mutable_args[i];
          const at::Tensor& device_out = mutable_args[i];
          if (on_neuron(device_out) && same_memory(cpu_out, device_out, map) &&
              (!cpu_out.sizes().equals(device_out.sizes()) ||
               !cpu_out.strides().equals(device_out.strides()))) {
            // The CPU kernel restrided an out argument in place; the device tensor follows.
            device_out.unsafeGetTensorImpl()->set_sizes_and_strides(
                cpu_out.sizes(), cpu_out.strides(), cpu_out.storage_offset());
          }
          for (auto& [index, out] : resized_outs) {
            if (index != i) continue;
            // The CPU kernel resized a temporary; the device tensor takes its memory.
            const at::Tensor adopted = adopt_cpu_tensor(cpu_out, map.device);
            out.unsafeGetTensorImpl()->set_storage_keep_dtype(adopted.storage());
            out.unsafeGetTensorImpl()->set_sizes_and_strides(cpu_out.sizes(), cpu_out.strides(),
                                                             cpu_out.storage_offset());
          }
          break;
        }
      }
      outputs.push_back(describe_tensor(value.toTensor()));
      continue;
    }
    if (value.isTensor()) {
      value = to_neuron_result(value.toTensor(), map, id);
      outputs.push_back(describe_tensor(value.toTensor()));
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        list[j] = to_neuron_result(list[j], map, id);
        outputs.push_back(describe_tensor(list[j]));
      }
    }
  }
  if (rng.has_value()) {
    uint64_t values = 0;
    for (const TensorDesc& out : outputs) {
      values += static_cast<uint64_t>(c10::multiply_integers(out.sizes));
    }
    rng->consumed(values);
  }
  charge(id, map.device, std::move(described), std::move(outputs));
}

}  // namespace

int register_direct_kernels() {
  // Structured ops reach a backend without its own kernel through their .out variant
  // (functional add becomes add.out into a fresh device tensor), and a few ops with a CPU
  // kernel fall back to a math decomposition with other numerics (native_layer_norm,
  // addr). Registering the fallback as the kernel of each such op runs the CPU kernel of
  // the op itself: the simulator sees the real op name, mixed-device checks see the user's
  // arguments, and no empty output is allocated first.
  // Never destroyed: deregistering at exit would race the dispatcher's own teardown.
  static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                            c10::DispatchKey::PrivateUse1, "torch_neuronx", 0);
  static bool done = false;
  if (done) return 0;
  done = true;
  int registered = 0;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto handle = dispatcher.findOp(name);
    if (!handle.has_value()) continue;
    const bool composite =
        handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
    if (!composite || handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        !handle->hasKernelForDispatchKey(c10::DispatchKey::CPU)) {
      continue;
    }
    const std::string unqualified = c10::toString(name).substr(6);  // without "aten::"
    library->impl(unqualified.c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    ++registered;
  }
  return registered;
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace neuron
