// Backend metadata of 'neuron' tensors (torch._utils.set/get_tensor_metadata): flags a library
// attaches to a device tensor (a layout tag, a format version) ride on the TensorImpl, so they
// survive torch.save/torch.load, detach, deepcopy and other shallow copies, as OpenReg's do.
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <map>
#include <string>
#include <unordered_map>

namespace neuron {

namespace {

struct NeuronBackendMeta final : public c10::BackendMeta {
  std::map<std::string, bool> flags;

  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    auto copy = c10::make_intrusive<NeuronBackendMeta>();
    copy->flags = flags;
    return copy;
  }
};

void for_serialization(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  auto* meta = dynamic_cast<NeuronBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
  if (meta == nullptr) return;
  for (const auto& [key, value] : meta->flags) metadata[key] = value;
}

void for_deserialization(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  if (metadata.empty()) return;  // conj / neg were taken by PyTorch already
  auto meta = c10::make_intrusive<NeuronBackendMeta>();
  if (auto* old = dynamic_cast<NeuronBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta())) {
    meta->flags = old->flags;
  }
  for (const auto& [key, value] : metadata) meta->flags[key] = value;
  t.unsafeGetTensorImpl()->set_backend_meta(meta);
}

struct Registration {
  Registration() {
    torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &for_serialization,
                                          &for_deserialization);
  }
} g_registration;

}  // namespace

}  // namespace neuron
