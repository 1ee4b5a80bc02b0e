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

namespace {

// Where a described tensor's data is: storage, offset and layout.
bool same_place(const TensorDesc& a, const TensorDesc& b) {
  return a.storage == b.storage && a.offset == b.offset && a.dtype == b.dtype &&
         a.sizes == b.sizes && a.strides == b.strides;
}

// Groups are short (AEE_MAX_OPS ops), so flat vectors searched linearly beat hashing places.
struct Dataflow {
  struct Latest {
    const TensorDesc* place;
    int32_t id;
  };
  struct Write {
    const TensorDesc* place;
    std::pair<int64_t, int64_t> extent;
  };
  std::vector<int32_t> pattern;
  std::vector<Latest> latest;   // per place, the group's latest output there
  std::vector<Write> written;   // the group's writes still standing

  Latest* find(const TensorDesc& t) {
    for (Latest& l : latest) {
      if (same_place(*l.place, t)) return &l;
    }
    return nullptr;
  }

  void visit(const TensorDesc& t, bool output) {
    if (t.dtype == c10::ScalarType::Undefined) return;
    const auto self = static_cast<int32_t>(pattern.size());
    if (t.device_type != 0 || t.storage == 0) {   // a CPU scalar, or no storage: no place
      pattern.push_back(self);
      return;
    }
    if (!output) {
      const Latest* l = find(t);
      pattern.push_back(l != nullptr ? l->id : self);
      return;
    }
    // A write ends every other place of its storage it overlaps.
    const auto span = extent(t);
    size_t kept = 0;
    for (const Write& w : written) {
      if (w.place->storage == t.storage && !same_place(*w.place, t) &&
          w.extent.first < span.second && span.first < w.extent.second) {
        if (Latest* l = find(*w.place)) {
          *l = latest.back();
          latest.pop_back();
        }
      } else {
        written[kept++] = w;
      }
    }
    written.resize(kept);
    written.push_back(Write{&t, span});
    if (Latest* l = find(t)) {
      l->id = self;
    } else {
      latest.push_back(Latest{&t, self});
    }
    pattern.push_back(self);
  }
};

}  // namespace

std::vector<int32_t> identity_pattern(const std::vector<OpDesc>& ops,
                                      const std::vector<int64_t>& group) {
  Dataflow flow;
  for (const int64_t index : group) {
    const OpDesc& op = at(ops, index);
    for (const ArgDesc& a : op.args) {
      if (a.kind != ArgDesc::kTensor && a.kind != ArgDesc::kTensorList) continue;
      for (const TensorDesc& t : a.tensors) flow.visit(t, false);
    }
    for (const TensorDesc& t : op.outputs) flow.visit(t, true);
  }
  return std::move(flow.pattern);
}

int32_t intern_group_key(const std::vector<OpDesc>& ops, const std::vector<int64_t>& group) {
  thread_local std::string bytes;
  bytes.clear();
  put<uint32_t>(bytes, static_cast<uint32_t>(group.size()));
  for (const int64_t index : group) put<int32_t>(bytes, at(ops, index).key);
  for (const int32_t id : identity_pattern(ops, group)) put<int32_t>(bytes, id);
  return intern(g_group_keys, bytes);
}

}  // namespace neuron
