#include "aten/OpDescriptor.h"

#include "runtime/NeuronStream.h"

namespace neuron {

TensorDesc describe_tensor(const at::Tensor& t) {
  TensorDesc d;
  if (!t.defined()) return d;
  d.sizes.assign(t.sizes().begin(), t.sizes().end());
  d.strides.assign(t.strides().begin(), t.strides().end());
  d.dtype = t.scalar_type();
  d.device_type = t.device().type() == c10::DeviceType::PrivateUse1 ? 0 : 1;
  if (t.has_storage()) {
    d.storage = reinterpret_cast<uintptr_t>(t.storage().unsafeGetStorageImpl());
    d.offset = t.storage_offset();
  }
  return d;
}

ArgDesc describe_ivalue(const c10::IValue& v) {
  ArgDesc a;
  if (v.isTensor()) {
    a.kind = ArgDesc::kTensor;
    a.tensors.push_back(describe_tensor(v.toTensor()));
  } else if (v.isTensorList() || v.isOptionalTensorList()) {
    a.kind = ArgDesc::kTensorList;
    for (const c10::IValue& e : v.toListRef()) {
      a.tensors.push_back(e.isTensor() ? describe_tensor(e.toTensor()) : TensorDesc{});
    }
  } else if (v.isDouble()) {
    a.kind = ArgDesc::kDouble;
    a.number = v.toDouble();
  } else if (v.isInt()) {
    a.kind = ArgDesc::kInt;
    a.number = static_cast<double>(v.toInt());
  } else if (v.isBool()) {
    a.kind = ArgDesc::kBool;
    a.number = v.toBool() ? 1.0 : 0.0;
  } else if (v.isIntList()) {
    a.kind = ArgDesc::kInts;
    const auto list = v.toIntList();
    a.ints.assign(list.begin(), list.end());
  } else if (v.isNone()) {
    a.kind = ArgDesc::kNone;
  } else {
    a.kind = ArgDesc::kOther;
  }
  return a;
}

void charge(int32_t name_id, c10::DeviceIndex device, std::vector<ArgDesc>&& args,
            std::vector<TensorDesc>&& outputs) {
  OpDesc op;
  op.name_id = name_id;
  op.device = device;
  op.stream = current_stream(device).id();
  op.args = std::move(args);
  op.outputs = std::move(outputs);
  enqueue_op(std::move(op));
}

void charge(const std::string& name, c10::DeviceIndex device, std::vector<ArgDesc>&& args,
            std::vector<TensorDesc>&& outputs) {
  charge(intern_op_name(name), device, std::move(args), std::move(outputs));
}

}  // namespace neuron
