// Time-only execution: 'neuron' tensors keep their shape, dtype, strides and storage identity
// but no values. Ops run their Meta kernels (shapes only) instead of CPU kernels and are queued
// and charged exactly as in normal execution, so the simulated time is the same to the
// nanosecond; device memory is counted against simulated HBM, but no host memory is touched.
// What needs values (.item(), copies to the host, data-dependent shapes) raises TimeOnlyError.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

struct python_error;  // torch/csrc/Exceptions.h
namespace pybind11 { class error_already_set; }

namespace neuron {

bool time_only();
void set_time_only(bool on);

// Raises torch_neuronx.TimeOnlyError (a RuntimeError): `op` needs tensor values. `why` says
// which values and what to do instead.
[[noreturn]] void raise_needs_values(const std::string& op, const std::string& why);

// Outside time-only mode, raises TimeOnlyError if `neuron_tensor` was computed in time-only
// mode (its storage holds no values) and `op` is about to read it.
void check_has_values(const at::Tensor& neuron_tensor, const std::string& op);

// The message of a Python exception raised by a Python kernel (clears it).
std::string python_error_text(::python_error& e);
std::string python_error_text(pybind11::error_already_set& e);

// The Python type TimeOnlyError is raised as (set once by torch_neuronx).
void set_time_only_error_type(void* python_type);

}  // namespace neuron
