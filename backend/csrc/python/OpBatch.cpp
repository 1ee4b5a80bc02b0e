#include "python/OpBatch.h"

#include "python/DynamoOff.h"
#include "runtime/NeuronQueue.h"
#include "runtime/OpKeys.h"

#include <pybind11/stl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>

namespace py = pybind11;

namespace neuron {

namespace {

struct OpBatch {
  OpBatchPtr ops;
};

// TensorDesc and QueuedOp are struct sequences (as os.stat_result): tuples with named fields,
// so code may read `t.sizes` or unpack `seq, name, device, stream, args, outputs, preset_ns = op`.
PyStructSequence_Field g_tensor_fields[] = {
    {"sizes", "tuple of ints"},
    {"strides", "tuple of ints, in elements"},
    {"dtype", "torch.dtype, None for an undefined tensor"},
    {"on_neuron", "bool: a device tensor (False: a 0-dim CPU scalar mixed into the op)"},
    {"storage", "int: the allocation (its address while it is alive), 0 for none"},
    {"offset", "int: the first element's offset into the storage, in elements"},
    {nullptr, nullptr}};
PyStructSequence_Desc g_tensor_desc = {
    "torch_neuronx._C.TensorDesc", "A tensor of a queued op: its layout and where its data is.",
    g_tensor_fields, 6};
PyStructSequence_Field g_op_fields[] = {
    {"seq", "int: issue order, unique in the process (-1 for ops made in Python)"},
    {"name", "str: the op's name (aten::add.Tensor, neuron::copy_h2d, ...)"},
    {"device", "int: device index"},
    {"stream", "int: stream id"},
    {"args", "tuple: per argument None, a bool, int or float, a TensorDesc, a list of "
             "TensorDesc (a tensor list) or a tuple of ints"},
    {"outputs", "tuple of TensorDesc"},
    {"preset_ns", "int: a known duration (compiled graph, collective, NKI kernel), -1 if none"},
    {"key", "int: the op's layout key (runtime/OpKeys.h), -1 with a preset (by name only)"},
    {nullptr, nullptr}};
PyStructSequence_Desc g_op_desc = {
    "torch_neuronx._C.QueuedOp", "One queued op, as the cost model sees it.", g_op_fields, 7};
PyTypeObject* g_tensor_type = nullptr;
PyTypeObject* g_op_type = nullptr;

py::object dtype_object(c10::ScalarType t) {
  if (t == c10::ScalarType::Undefined) return py::none();
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t)));
}

c10::ScalarType scalar_type(const py::handle& dtype, const std::string& name) {
  if (dtype.is_none()) return c10::ScalarType::Undefined;
  if (!THPDtype_Check(dtype.ptr())) {
    throw py::type_error("QueuedOp " + name + ": a tensor's dtype must be a torch.dtype or "
                         "None, got " + std::string(py::str(py::type::of(dtype))));
  }
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

template <typename T>
py::tuple ints(const std::vector<T>& values) {
  py::tuple out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = py::int_(values[i]);
  return out;
}

// Fills a new struct sequence; `items` are stolen.
py::object struct_sequence(PyTypeObject* type, std::initializer_list<py::object> items) {
  PyObject* o = PyStructSequence_New(type);
  if (o == nullptr) throw py::error_already_set();
  Py_ssize_t i = 0;
  for (const py::object& item : items) PyStructSequence_SetItem(o, i++, item.inc_ref().ptr());
  return py::reinterpret_steal<py::object>(o);
}

py::object to_python(const TensorDesc& t) {
  return struct_sequence(g_tensor_type,
                         {ints(t.sizes), ints(t.strides), dtype_object(t.dtype),
                          py::bool_(t.device_type == 0), py::int_(t.storage), py::int_(t.offset)});
}

py::object to_python(const ArgDesc& a) {
  switch (a.kind) {
    case ArgDesc::kTensor: return to_python(a.tensors.at(0));
    case ArgDesc::kTensorList: {
      py::list items;
      for (const TensorDesc& t : a.tensors) items.append(to_python(t));
      return std::move(items);
    }
    case ArgDesc::kDouble: return py::float_(a.number);
    case ArgDesc::kInt: return py::int_(static_cast<int64_t>(a.number));
    case ArgDesc::kBool: return py::bool_(a.number != 0.0);
    case ArgDesc::kInts: return ints(a.ints);
    default: return py::none();
  }
}

py::object to_python(const OpDesc& op) {
  py::tuple args(op.args.size());
  for (size_t i = 0; i < op.args.size(); ++i) args[i] = to_python(op.args[i]);
  py::tuple outputs(op.outputs.size());
  for (size_t i = 0; i < op.outputs.size(); ++i) outputs[i] = to_python(op.outputs[i]);
  return struct_sequence(g_op_type,
                         {py::int_(static_cast<int64_t>(op.seq)), py::str(op_name(op.name_id)),
                          py::int_(static_cast<int>(op.device)), py::int_(op.stream), args,
                          outputs, py::int_(op.preset_ns), py::int_(op.key)});
}

// A tensor made in Python: a TensorDesc, or any tuple in its field order (a tuple whose first
// item is the sizes tuple); None is an undefined tensor.
bool is_tensor(const py::handle& v) {
  return PyTuple_Check(v.ptr()) && PyTuple_GET_SIZE(v.ptr()) == 6 &&
         PyTuple_Check(PyTuple_GET_ITEM(v.ptr(), 0));
}

TensorDesc tensor_from_python(const py::handle& v, const std::string& name) {
  TensorDesc t;
  if (v.is_none()) return t;
  if (!is_tensor(v)) {
    throw py::type_error("QueuedOp " + name + ": expected a TensorDesc (sizes, strides, dtype, "
                         "on_neuron, storage, offset) or None, got " +
                         std::string(py::repr(v)).substr(0, 200));
  }
  const auto fields = py::reinterpret_borrow<py::tuple>(v);
  t.sizes = fields[0].cast<std::vector<int64_t>>();
  t.strides = fields[1].cast<std::vector<int64_t>>();
  if (t.sizes.size() != t.strides.size()) {
    throw py::value_error("QueuedOp " + name + ": a tensor has " + std::to_string(t.sizes.size()) +
                          " sizes but " + std::to_string(t.strides.size()) +
                          " strides; give one stride per size");
  }
  t.dtype = scalar_type(fields[2], name);
  t.device_type = py::bool_(fields[3]) ? 0 : 1;
  t.storage = fields[4].cast<uint64_t>();
  t.offset = fields[5].cast<int64_t>();
  return t;
}

ArgDesc arg_from_python(const py::handle& value, size_t position, const std::string& name) {
  ArgDesc a;
  if (value.is_none()) {
    a.kind = ArgDesc::kNone;
  } else if (is_tensor(value)) {
    a.kind = ArgDesc::kTensor;
    a.tensors.push_back(tensor_from_python(value, name));
  } else if (PyBool_Check(value.ptr())) {
    a.kind = ArgDesc::kBool;
    a.number = value.ptr() == Py_True ? 1.0 : 0.0;
  } else if (PyLong_Check(value.ptr())) {
    a.kind = ArgDesc::kInt;
    a.number = static_cast<double>(value.cast<int64_t>());
  } else if (PyFloat_Check(value.ptr())) {
    a.kind = ArgDesc::kDouble;
    a.number = value.cast<double>();
  } else if (PyList_Check(value.ptr())) {
    a.kind = ArgDesc::kTensorList;
    for (const py::handle& t : value) a.tensors.push_back(tensor_from_python(t, name));
  } else if (PyTuple_Check(value.ptr())) {
    a.kind = ArgDesc::kInts;
    a.ints = value.cast<std::vector<int64_t>>();
  } else {
    throw py::type_error("QueuedOp " + name + ": argument " + std::to_string(position) + " is a " +
                         std::string(py::str(py::type::of(value))) + "; expected None, a bool, "
                         "int or float, a TensorDesc, a list of TensorDesc (a tensor list) or a "
                         "tuple of ints");
  }
  return a;
}

// An op made in Python: a QueuedOp, or any sequence in its field order (seq, name, device,
// stream, args, outputs, preset_ns); its key is computed as the queue computes it.
OpDesc op_from_python(const py::handle& item) {
  const auto fields = py::reinterpret_borrow<py::sequence>(item);
  if (py::len(fields) < 7) {
    throw py::value_error("QueuedOp: expected (seq, name, device, stream, args, outputs, "
                          "preset_ns), got " + std::string(py::repr(item)).substr(0, 200));
  }
  OpDesc op;
  const std::string name = fields[1].cast<std::string>();
  op.seq = static_cast<uint64_t>(fields[0].cast<int64_t>());
  op.name_id = intern_op_name(name);
  op.device = static_cast<c10::DeviceIndex>(fields[2].cast<int>());
  op.stream = fields[3].cast<int64_t>();
  const auto args = py::reinterpret_borrow<py::sequence>(fields[4]);
  for (size_t i = 0; i < py::len(args); ++i) op.args.push_back(arg_from_python(args[i], i, name));
  const py::object outputs = fields[5];
  for (const py::handle& t : outputs) op.outputs.push_back(tensor_from_python(t, name));
  op.preset_ns = fields[6].cast<int64_t>();
  if (op.preset_ns < 0) op.key = intern_op_key(op);
  return op;
}

size_t checked_index(const OpBatch& b, int64_t i) {
  const auto n = static_cast<int64_t>(b.ops->size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw py::index_error("OpBatch index out of range");
  return static_cast<size_t>(i);
}

// One Python list of an int field per op, made without per-op Python calls.
template <typename F>
py::list column(const std::vector<OpDesc>& ops, F field) {
  py::list out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    PyObject* v = PyLong_FromLongLong(static_cast<long long>(field(ops[i])));
    if (v == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), v);
  }
  return out;
}

}  // namespace

void bind_op_batch(py::module& m) {
  g_tensor_type = PyStructSequence_NewType(&g_tensor_desc);
  g_op_type = PyStructSequence_NewType(&g_op_desc);
  if (g_tensor_type == nullptr || g_op_type == nullptr) throw py::error_already_set();
  m.attr("TensorDesc") = py::handle(reinterpret_cast<PyObject*>(g_tensor_type));
  m.attr("QueuedOp") = py::handle(reinterpret_cast<PyObject*>(g_op_type));

  py::class_<OpBatch>(m, "OpBatch",
      "Ops drained from the queue, in issue order: a sequence of QueuedOp (made when read), "
      "with the fields the cost model reads for every op as whole columns. OpBatch(ops) makes "
      "one from QueuedOps or tuples in their field order (what the profiler's advice prices).")
      .def(py::init([](const py::iterable& items) {
             auto ops = std::make_shared<std::vector<OpDesc>>();
             for (const py::handle& item : items) ops->push_back(op_from_python(item));
             return OpBatch{std::move(ops)};
           }),
           py::arg("ops"))
      .def("__len__", [](const OpBatch& b) { return b.ops->size(); })
      .def("__getitem__", [](const OpBatch& b, int64_t i) {
        return to_python((*b.ops)[checked_index(b, i)]);
      })
      .def("__getitem__", [](const OpBatch& b, const py::slice& s) {
        size_t start = 0, stop = 0, step = 0, length = 0;
        if (!s.compute(b.ops->size(), &start, &stop, &step, &length)) throw py::error_already_set();
        py::list out;
        for (size_t k = 0; k < length; ++k) out.append(to_python((*b.ops)[start + k * step]));
        return out;
      })
      .def("columns", [](const OpBatch& b) {
        const auto& ops = *b.ops;
        return py::make_tuple(column(ops, [](const OpDesc& o) { return o.key; }),
                              column(ops, [](const OpDesc& o) { return o.preset_ns; }),
                              column(ops, [](const OpDesc& o) { return o.device; }),
                              column(ops, [](const OpDesc& o) { return o.stream; }));
      }, "(keys, preset_ns, devices, streams): one list per field, one entry per op")
      .def("group_key", [](const OpBatch& b, const std::vector<int64_t>& group) {
        return intern_group_key(*b.ops, group);
      }, py::arg("group"), "Interned key of the ops at indices `group` fused into one program")
      .def("pattern", [](const OpBatch& b, const std::vector<int64_t>& group) {
        return ints(identity_pattern(*b.ops, group));
      }, py::arg("group"), "The dataflow of the ops at indices `group` (runtime/OpKeys.h)");
}

void register_cost_function(py::function fn) {
  // Never freed: static destructors run after the interpreter is gone.
  auto* shared = new py::function(std::move(fn));
  set_cost_function([shared](const OpBatchPtr& ops, bool at_sync) {
    try {
      DynamoOff not_traced;
      return (*shared)(OpBatch{ops}, at_sync).cast<std::vector<int64_t>>();
    } catch (py::error_already_set& e) {
      // KeyboardInterrupt / SystemExit are the user's, not a failure of the model: they
      // propagate as themselves (the queue keeps the batch for the next sync).
      if (!e.matches(PyExc_Exception)) throw;
      TORCH_CHECK(false, "neuron-sim cost model failed while timing ", ops->size(), " ops: ",
                  e.what());
    }
  });
}

}  // namespace neuron
