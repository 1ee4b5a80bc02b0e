// torch_neuronx._C: the thin Python surface of the C++ runtime (configuration, clocks,
// the cost-function hook, op policy, generators).
#include "aten/Autocast.h"
#include "aten/CpuFallback.h"
#include "aten/OpPolicy.h"
#include "aten/TensorAlias.h"
#include "aten/TimeOnly.h"
#include "distributed/NeuronBackend.h"
#include "python/Interpreter.h"
#include "python/OpBatch.h"
#include "runtime/NeuronAllocator.h"
#include "runtime/NeuronGenerator.h"
#include "runtime/NeuronGuard.h"
#include "runtime/NeuronQueue.h"
#include "runtime/NeuronRuntime.h"
#include "runtime/NeuronStream.h"

#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/tensor_dtypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace neuron {

namespace {

// Null while the interpreter is not running (at exit): the drain then skips the cost model.
std::shared_ptr<void> hold_interpreter() {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return nullptr;
  return std::make_shared<HeldInterpreter>();
}

// Waits without the GIL when this thread holds it, and takes it back before returning.
void wait_without_interpreter(const std::function<void()>& wait) {
  if (!Py_IsInitialized() || _Py_IsFinalizing() || !PyGILState_Check()) return wait();
  without_gil([&] {
    wait();
    return 0;
  });
}

void release_gil_and_drain() {
  without_gil([] {
    drain();
    return 0;
  });
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "neuron-sim C++ runtime: simulated Trainium device for PyTorch";
  set_interpreter_lock(&hold_interpreter, &wait_without_interpreter);
  bind_op_batch(m);

  m.def("_configure", [](int device_count, int64_t hbm_bytes, const std::string& instance,
                         bool host_cc_streams, int owned_device, const std::string& owner) {
    RuntimeConfig cfg;
    cfg.owned_device = static_cast<c10::DeviceIndex>(owned_device);
    cfg.owner = owner;
    TORCH_CHECK(device_count >= 0 && device_count <= kMaxDevices,
                "Neuron runtime init failed: ", device_count, " NeuronCores are visible but a "
                "PyTorch process can index at most ", kMaxDevices, " devices. Reduce the visible "
                "cores with NEURON_RT_NUM_CORES or NEURON_RT_VISIBLE_CORES.");
    cfg.device_count = static_cast<c10::DeviceIndex>(device_count);
    cfg.hbm_bytes_per_device = hbm_bytes;
    cfg.instance_name = instance;
    cfg.host_cc_streams = host_cc_streams;
    configure(cfg);
  }, py::arg("device_count"), py::arg("hbm_bytes"), py::arg("instance"),
     py::arg("host_cc_streams"), py::arg("owned_device") = -1, py::arg("owner") = "");
  m.def("_owned_device", [] { return static_cast<int>(config().owned_device); });
  m.def("_set_config_error", [](const std::string& message) {
    RuntimeConfig cfg;
    cfg.device_count = 0;
    cfg.error = message;
    configure(cfg);
  });
  m.def("_device_count", [] { return static_cast<int>(config().device_count); });
  m.def("_instance_name", [] { return config().instance_name; });
  m.def("_is_initialized", &is_initialized);
  m.def("_memory_placed", &memory_placed);
  m.def("_lazy_init", &lazy_init);
  m.def("_is_in_bad_fork", &in_bad_fork);
  m.def("_register_direct_kernels", &register_direct_kernels);
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int d) { set_current_device(static_cast<c10::DeviceIndex>(d)); });
  m.def("_check_device", [](int d) { check_device_index(static_cast<c10::DeviceIndex>(d)); });

  m.def("_set_cost_function", &register_cost_function);
  m.def("_drain", &release_gil_and_drain);
  m.def("_set_launch_blocking", &set_launch_blocking);
  m.def("_set_event_record_ns", [](int64_t ns) {
    TORCH_CHECK(ns >= 0, "an event record's simulated duration must be >= 0 ns, got ", ns);
    set_event_record_ns(ns);
  });
  m.def("_stream_clock_ns", [](int device, int64_t stream_id) {
    return without_gil([&] {
      return stream_clock_ns(c10::Stream(c10::Stream::UNSAFE,
                                         c10::Device(c10::DeviceType::PrivateUse1,
                                                     static_cast<c10::DeviceIndex>(device)),
                                         stream_id));
    });
  });
  m.def("_device_clock_ns", [](int device, bool drain) {
    const auto index = static_cast<c10::DeviceIndex>(device);
    return without_gil([&] { return device_clock_ns(index, drain); });
  }, py::arg("device"), py::arg("drain") = true);
  // Charges work whose simulated duration is already known (a compiled graph, a collective,
  // an NKI kernel) to the current stream of `device`, in issue order with everything else.
  m.def("_enqueue_timed", [](const std::string& name, int device, int64_t ns) {
    TORCH_CHECK(ns >= 0, "simulated duration must be >= 0 ns, got ", ns);
    check_device_index(static_cast<c10::DeviceIndex>(device));
    OpDesc op;
    op.name_id = intern_op_name(name);
    op.device = static_cast<c10::DeviceIndex>(device);
    op.stream = current_stream(op.device).id();
    op.preset_ns = ns;
    enqueue_op(std::move(op));
  });
  // Off while a compiled graph executes its ops (this thread only); the graph is charged
  // once with _enqueue_timed. Returns the previous value.
  m.def("_set_charging", [](bool on) {
    const bool previous = charging();
    set_charging(on);
    return previous;
  });
  // Nanoseconds of timed work (NKI kernels, collectives) issued on this thread while charging
  // was off, since the last call; resets the count.
  m.def("_take_captured_ns", &take_captured_ns);
  m.def("_activity_logging", &activity_logging);
  // lanes: [(lane_name, offset_ns, duration_ns, label), ...] for the op `seq` (profiling only).
  using Lanes = std::vector<std::tuple<std::string, int64_t, int64_t, std::string>>;
  m.def("_record_lanes", [](uint64_t seq, const Lanes& lanes) {
    std::vector<LaneSpan> spans;
    spans.reserve(lanes.size());
    for (const auto& [lane, offset, duration, label] : lanes) {
      spans.push_back(LaneSpan{intern_lane_name(lane), offset, duration, label});
    }
    record_lanes(seq, std::move(spans));
  });

  m.def("_set_op_status", [](const std::string& name, int status) {
    set_op_status(name, static_cast<OpStatus>(status));
  });
  m.def("_set_fallback_only_for_unimplemented", &set_fallback_only_for_unimplemented);
  m.def("_fallback_ops", &fallback_op_names);
  m.def("_autocast_ops", &autocast_ops);
  m.def("_clear_fallback_ops", &clear_fallback_ops);

  // Time-only execution (aten/TimeOnly.h).
  m.def("_set_time_only", &set_time_only);
  m.def("_time_only", &time_only);
  m.def("_set_time_only_error_type", [](py::object type) {
    set_time_only_error_type(type.ptr());   // keeps its own reference
  });
  // A CPU tensor over a device tensor's memory, read without a charge or a sync: for kernels
  // whose device code reads small index tensors itself (grouped GEMM offsets).
  m.def("_host_alias", [](const at::Tensor& t) { return cpu_alias(t); });
  m.def("_holds_values", [](const at::Tensor& t) {
    return !t.has_storage() || holds_values(t.storage());
  });

  // The backend="neuron" process group type; defined on demand, after torch.distributed
  // has registered its Backend base class.
  m.def("_init_distributed", [m]() { init_distributed_bindings(m); });

  m.def("_get_default_generator", [](int device) {
    const at::Generator& gen = default_generator(static_cast<c10::DeviceIndex>(device));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
  });
}

}  // namespace neuron
