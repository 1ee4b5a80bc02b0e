#include "aten/TimeOnly.h"

#include "python/Interpreter.h"
#include "runtime/NeuronAllocator.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

#include <atomic>

namespace neuron {

namespace {

std::atomic<bool> g_time_only{false};
PyObject* g_error_type = nullptr;

// Derives from torch's PyTorchError so that every Python entry point of torch raises it as
// torch_neuronx.TimeOnlyError (RuntimeError until torch_neuronx has set the type).
struct TimeOnlyError : public torch::PyTorchError {
  using torch::PyTorchError::PyTorchError;
  PyObject* python_type() override {
    return g_error_type != nullptr ? g_error_type : PyExc_RuntimeError;
  }
};

}  // namespace

bool time_only() { return g_time_only.load(std::memory_order_relaxed); }

void set_time_only(bool on) { g_time_only.store(on); }

void set_time_only_error_type(void* python_type) {
  Py_XINCREF(static_cast<PyObject*>(python_type));
  g_error_type = static_cast<PyObject*>(python_type);
}

std::string python_error_text(python_error& e) {
  HeldInterpreter gil;
  e.restore();
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text = "(no message)";
  if (value != nullptr) {
    if (PyObject* str = PyObject_Str(value)) {
      if (const char* utf8 = PyUnicode_AsUTF8(str)) text = utf8;
      Py_DECREF(str);
    }
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return text;
}

std::string python_error_text(pybind11::error_already_set& e) {
  HeldInterpreter gil;
  std::string text = e.what();
  e.restore();
  PyErr_Clear();
  return text.substr(0, text.find('\n'));   // the message, not pybind11's traceback
}

void raise_needs_values(const std::string& op, const std::string& why) {
  throw TimeOnlyError(op + " needs tensor values, which time-only mode does not compute: " + why);
}

void check_has_values(const at::Tensor& neuron_tensor, const std::string& op) {
  if (time_only() || !neuron_tensor.has_storage() || holds_values(neuron_tensor.storage())) return;
  raise_needs_values(op, "this tensor was computed in time-only mode and holds no values. "
                         "Recompute it outside torch_neuronx.time_only(), or load values into "
                         "it first (tensor.copy_(values) over the whole tensor).");
}

}  // namespace neuron
