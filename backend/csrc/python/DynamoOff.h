// The Python the runtime calls back into (the cost model at a drain, the collective hook) is
// the simulator, not user code: torch.compile, with any backend, must not trace it. A drain can
// happen inside a compiled function (a graph break that calls .item()), where Dynamo's frame
// callback is active. The callback is per thread; this switches it off for one call, as
// torch._dynamo.disable does, without importing torch._dynamo (seconds of import time).
#pragma once

#include <pybind11/pybind11.h>

namespace neuron {

class DynamoOff {
 public:
  // Call with the GIL held.
  DynamoOff() : setter_(setter()) {
    if (setter_ != nullptr) prior_ = (*setter_)(pybind11::none());
  }
  ~DynamoOff() {
    if (setter_ == nullptr) return;
    try {
      (*setter_)(prior_);
    } catch (pybind11::error_already_set&) {
      // nothing sensible to do in a destructor; the error was fetched and dropped
    }
  }
  DynamoOff(const DynamoOff&) = delete;
  DynamoOff& operator=(const DynamoOff&) = delete;

 private:
  // torch._C._dynamo.eval_frame.set_eval_frame, or null in a torch without it.
  static pybind11::object* setter() {
    static pybind11::object* fn = [] () -> pybind11::object* {
      try {
        // Never freed: static destructors run after the interpreter is gone.
        return new pybind11::object(pybind11::module_::import("torch._C")
                                        .attr("_dynamo").attr("eval_frame").attr("set_eval_frame"));
      } catch (pybind11::error_already_set&) {
        return nullptr;
      }
    }();
    return fn;
  }

  pybind11::object* setter_;
  pybind11::object prior_;
};

}  // namespace neuron
