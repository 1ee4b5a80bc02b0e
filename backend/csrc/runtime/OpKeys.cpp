#include "runtime/OpKeys.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

namespace neuron {

namespace {

std::mutex g_keys_mutex;  // leaf lock (NeuronQueue.h's lock order); guards both tables
std::unordered_map<std::string, int32_t> g_op_keys;
std::unordered_map<std::string, int32_t> g_group_keys;

template <typename T>
void put(std::string& bytes, T value) {
  bytes.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void put_ints(std::string& bytes, const std::vector<int64_t>& values) {
  put<uint32_t>(bytes, static_cast<uint32_t>(values.size()));
  bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
}

void put_layout(std::string& bytes, const TensorDesc& t) {
  put_ints(bytes, t.sizes);
  put_ints(bytes, t.strides);
  put<int8_t>(bytes, static_cast<int8_t>(t.dtype));
  put<int8_t>(bytes, t.device_type);
}

int32_t intern(std::unordered_map<std::string, int32_t>& table, const std::string& bytes) {
  std::lock_guard<std::mutex> lock(g_keys_mutex);
  return table.try_emplace(bytes, static_cast<int32_t>(table.size())).first->second;
}

const OpDesc& at(const std::vector<OpDesc>& ops, int64_t index) {
  TORCH_CHECK(index >= 0 && static_cast<size_t>(index) < ops.size(), "op index ", index,
              " is outside the batch of ", ops.size(), " ops");
  return ops[static_cast<size_t>(index)];
}

// [first, end) elements of its storage a tensor covers.
std::pair<int64_t, int64_t> extent(const TensorDesc& t) {
  int64_t end = t.offset + 1;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] == 0) return {t.offset, t.offset};
    end += (t.sizes[d] - 1) * std::llabs(t.strides[d]);
  }
  return {t.offset, end};
}

}  // namespace

int32_t intern_op_key(const OpDesc& op) {
  thread_local std::string bytes;
  bytes.clear();
  put<int32_t>(bytes, op.name_id);
  put<uint32_t>(bytes, static_cast<uint32_t>(op.args.size()));
  for (const ArgDesc& a : op.args) {
    put<uint8_t>(bytes, a.kind);
    switch (a.kind) {
      case ArgDesc::kTensor:
      case ArgDesc::kTensorList:
        put<uint32_t>(bytes, static_cast<uint32_t>(a.tensors.size()));
        for (const TensorDesc& t : a.tensors) put_layout(bytes, t);
        break;
      case ArgDesc::kInt:
      case ArgDesc::kBool:
        put<int64_t>(bytes, static_cast<int64_t>(a.number));
        break;
      case ArgDesc::kInts:
        put_ints(bytes, a.ints);
        break;
      default:  // kDouble: its value is left out; kNone, kOther: the kind is all there is
        break;
    }
  }
  put<uint32_t>(bytes, static_cast<uint32_t>(op.outputs.size()));
  for (const TensorDesc& t : op.outputs) put_layout(bytes, t);
  return intern(g_op_keys, bytes);
}

std::vector<int32_t> identity_pattern(const std::vector<OpDesc>& ops,
                                      const std::vector<int64_t>& group) {
  struct Write {
    std::pair<int64_t, int64_t> extent;
    std::string place;
  };
  std::vector<int32_t> pattern;
  std::unordered_map<std::string, int32_t> latest;               // place -> its latest output
  std::unordered_map<uint64_t, std::vector<Write>> written;      // storage -> the group's writes
  std::string place;
  auto visit = [&](const TensorDesc& t, bool output) {
    if (t.dtype == c10::ScalarType::Undefined) return;
    const auto self = static_cast<int32_t>(pattern.size());
    if (t.device_type != 0 || t.storage == 0) {   // a CPU scalar, or no storage: no place
      pattern.push_back(self);
      return;
    }
    place.clear();
    put<uint64_t>(place, t.storage);
    put<int64_t>(place, t.offset);
    put_layout(place, t);
    if (!output) {
      const auto it = latest.find(place);
      pattern.push_back(it != latest.end() ? it->second : self);
      return;
    }
    const auto span = extent(t);
    std::vector<Write>& writes = written[t.storage];
    std::vector<Write> keep;
    for (Write& w : writes) {
      if (w.place != place && w.extent.first < span.second && span.first < w.extent.second) {
        latest.erase(w.place);
      } else {
        keep.push_back(std::move(w));
      }
    }
    keep.push_back(Write{span, place});
    writes = std::move(keep);
    latest[place] = self;
    pattern.push_back(self);
  };
  for (const int64_t index : group) {
    const OpDesc& op = at(ops, index);
    for (const ArgDesc& a : op.args) {
      if (a.kind != ArgDesc::kTensor && a.kind != ArgDesc::kTensorList) continue;
      for (const TensorDesc& t : a.tensors) visit(t, false);
    }
    for (const TensorDesc& t : op.outputs) visit(t, true);
  }
  return pattern;
}

int32_t intern_group_key(const std::vector<OpDesc>& ops, const std::vector<int64_t>& group) {
  std::string bytes;
  put<uint32_t>(bytes, static_cast<uint32_t>(group.size()));
  for (const int64_t index : group) put<int32_t>(bytes, at(ops, index).key);
  for (const int32_t id : identity_pattern(ops, group)) put<int32_t>(bytes, id);
  return intern(g_group_keys, bytes);
}

}  // namespace neuron
