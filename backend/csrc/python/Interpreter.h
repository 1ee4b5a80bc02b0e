// Taking and letting go of the GIL so that a thread the interpreter ends at exit can unwind.
//
// While the interpreter finalizes, a daemon thread that takes the GIL is ended by a forced
// unwind (pthread_exit). Two rules keep that unwind from aborting the process after the
// script's work succeeded:
//  - take the GIL in a function body or a constructor, never in a destructor: an unwind that
//    starts in a noexcept frame calls std::terminate ("terminate called without an active
//    exception");
//  - let it go only while this thread's state is current: the unwind leaves Python without it,
//    and releasing it then is "Fatal Python error: PyGILState_Release: thread state ... must be
//    current when releasing".
#pragma once

#include <Python.h>
#include <cxxabi.h>

namespace neuron {

// Holds the GIL for a scope; pybind11::gil_scoped_acquire, safe in a thread ended at exit.
class HeldInterpreter {
 public:
  HeldInterpreter() : state_(PyGILState_Ensure()) {}
  ~HeldInterpreter() {
    if (PyGILState_Check()) PyGILState_Release(state_);
  }
  HeldInterpreter(const HeldInterpreter&) = delete;
  HeldInterpreter& operator=(const HeldInterpreter&) = delete;

 private:
  PyGILState_STATE state_;
};

// Runs f with the GIL released and takes it back in this body.
template <class F>
auto without_gil(F&& f) {
  PyThreadState* state = PyEval_SaveThread();
  auto result = [&] {
    try {
      return f();
    } catch (abi::__forced_unwind&) {
      throw;  // the thread is being ended: it must not take the GIL back
    } catch (...) {
      PyEval_RestoreThread(state);
      throw;
    }
  }();
  PyEval_RestoreThread(state);
  return result;
}

}  // namespace neuron
