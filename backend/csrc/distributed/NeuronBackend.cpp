#include "distributed/NeuronBackend.h"

#include "aten/TensorAlias.h"
#include "aten/TimeOnly.h"
#include "runtime/NeuronAllocator.h"
#include "python/DynamoOff.h"
#include "python/Interpreter.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <mutex>

namespace py = pybind11;

namespace neuron {

namespace {

using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;

at::Tensor host(const at::Tensor& t) { return on_neuron(t) ? cpu_alias(t) : t; }

// A list of tensors, or a list of lists of them.
template <typename T>
std::vector<T> host(const std::vector<T>& ts) {
  std::vector<T> out;
  out.reserve(ts.size());
  for (const T& t : ts) out.push_back(host(t));
  return out;
}

// PREMUL_SUM (NCCL's; FSDP2 uses it for a gradient divide factor): every rank multiplies its
// input by the factor, then the ranks sum. The host backend only sums.
bool is_premul_sum(const c10d::ReduceOp& op) { return op.op_ == c10d::ReduceOp::PREMUL_SUM; }

at::Scalar premul_factor(const c10d::ReduceOp& op) {
  const auto* s = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s != nullptr, "ReduceOp.PREMUL_SUM without a factor: create it with "
              "torch.distributed._make_nccl_premul_sum(factor).");
  if (!s->tensor_factor.defined()) return at::Scalar(s->double_factor);
  TORCH_CHECK(s->tensor_factor.numel() == 1, "PREMUL_SUM factor must be one number, got a "
              "tensor of shape ", s->tensor_factor.sizes(), ".");
  return host(s->tensor_factor).item();
}

// The reduce op the host backend runs, with the host tensors already scaled (in place for
// in-place collectives, else on copies).
template <typename Options>
Options summed(const Options& opts, std::vector<at::Tensor>& host_inputs, bool in_place) {
  if (!is_premul_sum(opts.reduceOp) || time_only()) return opts;
  const at::Scalar factor = premul_factor(opts.reduceOp);
  for (at::Tensor& t : host_inputs) t = in_place ? t.mul_(factor) : t.mul(factor);
  Options sum = opts;
  sum.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  return sum;
}

std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& ls) {
  std::vector<at::Tensor> out;
  for (const auto& l : ls) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// The host backend's work, seen with the caller's 'neuron' tensors as its result: DDP and
// the functional collectives read results from the future, and must get device tensors.
class NeuronWork : public Work {
 public:
  NeuronWork(WorkPtr inner, std::vector<at::Tensor> outputs)
      : Work(), inner_(std::move(inner)), outputs_(std::move(outputs)) {}

  // Without inner work (time-only mode) the collective is complete when issued.
  bool isCompleted() override { return !inner_ || inner_->isCompleted(); }
  bool isSuccess() const override { return !inner_ || inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_ ? inner_->exception() : nullptr; }
  int sourceRank() const override { return inner_ ? inner_->sourceRank() : -1; }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override { return !inner_ || inner_->wait(timeout); }
  void abort() override {
    if (inner_) inner_->abort();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()));
      auto outputs = outputs_;
      auto future = future_;
      if (!inner_) {
        future->markCompleted(c10::IValue(outputs));
        return future_;
      }
      inner_->getFuture()->addCallback([outputs, future](c10::ivalue::Future& done) {
        if (done.hasError()) {
          future->setError(done.exception_ptr());
        } else {
          future->markCompleted(c10::IValue(outputs));
        }
      });
    }
    return future_;
  }

 private:
  WorkPtr inner_;
  std::vector<at::Tensor> outputs_;
  std::mutex mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class NeuronBackend : public c10d::Backend {
 public:
  NeuronBackend(c10::intrusive_ptr<c10d::Backend> host_backend, py::object hook)
      : Backend(host_backend->getRank(), host_backend->getSize()),
        host_(std::move(host_backend)),
        hook_(new py::object(std::move(hook))) {}

  ~NeuronBackend() override {
    // The hook is a Python object: drop it only while the interpreter is alive.
    if (Py_IsInitialized() && !_Py_IsFinalizing()) {
      HeldInterpreter gil;
      delete hook_;
    }
  }

  const std::string getBackendName() const override { return "neuron"; }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }
  void abort() override { host_->abort(); }
  void shutdown() override { host_->shutdown(); }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }

  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    check("broadcast", tensors, tensors, -1, static_cast<int>(opts.rootRank));
    auto h = host(tensors);
    return run([&] { return host_->broadcast(h, opts); }, tensors);
  }

  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    check("all_reduce", tensors, tensors, reduce_op(opts.reduceOp), -1);
    auto h = host(tensors);
    const auto o = summed(opts, h, /*in_place=*/true);
    return run([&] { return host_->allreduce(h, o); }, tensors);
  }

  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    check("all_reduce_coalesced", tensors, tensors, reduce_op(opts.reduceOp), -1);
    auto h = host(tensors);
    const auto o = summed(opts, h, /*in_place=*/true);
    return run([&] { return host_->allreduce_coalesced(h, o); }, tensors);
  }

  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    check("reduce", tensors, tensors, reduce_op(opts.reduceOp), static_cast<int>(opts.rootRank));
    auto h = host(tensors);
    const auto o = summed(opts, h, /*in_place=*/true);
    return run([&] { return host_->reduce(h, o); }, tensors);
  }

  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override {
    check("all_gather", inputs, flat(outputs), -1, -1);
    auto ho = host(outputs);
    auto hi = host(inputs);
    return run([&] { return host_->allgather(ho, hi, opts); }, flat(outputs));
  }

  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override {
    check("all_gather_into_tensor", {input}, {output}, -1, -1);
    auto ho = host(output);
    auto hi = host(input);
    return run([&] { return host_->_allgather_base(ho, hi, opts); }, {output});
  }

  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    check("all_gather_into_tensor_coalesced", inputs, outputs, -1, -1);
    auto ho = host(outputs);
    auto hi = host(inputs);
    return run([&] { return host_->allgather_into_tensor_coalesced(ho, hi, opts); }, outputs);
  }

  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override {
    check("gather", inputs, flat(outputs), -1, static_cast<int>(opts.rootRank));
    auto ho = host(outputs);
    auto hi = host(inputs);
    return run([&] { return host_->gather(ho, hi, opts); }, flat(outputs));
  }

  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override {
    check("scatter", flat(inputs), outputs, -1, static_cast<int>(opts.rootRank));
    auto ho = host(outputs);
    auto hi = host(inputs);
    return run([&] { return host_->scatter(ho, hi, opts); }, outputs);
  }

  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs,
                         std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    check("reduce_scatter", flat(inputs), outputs, reduce_op(opts.reduceOp), -1);
    auto ho = host(outputs);
    auto hi = host(inputs);
    auto o = opts;
    for (auto& list : hi) o = summed(opts, list, /*in_place=*/false);
    return run([&] { return host_->reduce_scatter(ho, hi, o); }, outputs);
  }

  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    check("reduce_scatter_tensor", {input}, {output}, reduce_op(opts.reduceOp), -1);
    auto ho = host(output);
    std::vector<at::Tensor> hi{host(input)};
    const auto o = summed(opts, hi, /*in_place=*/false);
    return run([&] { return host_->_reduce_scatter_base(ho, hi[0], o); }, {output});
  }

  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    check("reduce_scatter_tensor_coalesced", inputs, outputs, reduce_op(opts.reduceOp), -1);
    auto ho = host(outputs);
    auto hi = host(inputs);
    const auto o = summed(opts, hi, /*in_place=*/false);
    return run([&] { return host_->reduce_scatter_tensor_coalesced(ho, hi, o); }, outputs);
  }

  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override {
    check("all_to_all_single", {input}, {output}, -1, -1);
    auto ho = host(output);
    auto hi = host(input);
    return run([&] { return host_->alltoall_base(ho, hi, output_splits, input_splits, opts); },
               {output});
  }

  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override {
    check("all_to_all", inputs, outputs, -1, -1);
    auto ho = host(outputs);
    auto hi = host(inputs);
    return run([&] { return host_->alltoall(ho, hi, opts); }, outputs);
  }

  WorkPtr send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    check("send", tensors, {}, -1, dst);
    auto h = host(tensors);
    return run([&] { return host_->send(h, dst, tag); }, tensors);
  }

  WorkPtr recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    check("recv", {}, tensors, -1, src);
    auto h = host(tensors);
    return run([&] { return host_->recv(h, src, tag); }, tensors);
  }

  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    check("recv", {}, tensors, -1, -1);
    auto h = host(tensors);
    return run([&] { return host_->recvAnysource(h, tag); }, tensors);
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    check("barrier", {}, {}, -1, -1);
    return host_->barrier(opts);
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    check("barrier", {}, {}, -1, -1);
    host_->monitoredBarrier(opts, wait_all_ranks);
  }

 private:
  static int reduce_op(const c10d::ReduceOp& op) { return static_cast<int>(op.op_); }

  // Validates the call and charges its simulated time (Python raises on bad input).
  void check(const char* op, const std::vector<at::Tensor>& inputs,
             const std::vector<at::Tensor>& outputs, int reduce, int peer) {
    HeldInterpreter gil;
    DynamoOff not_traced;
    (*hook_)(op, inputs, outputs, reduce, peer);
  }

  // The host backend's collective, seen with the device tensors as results. In time-only
  // mode there are no values to move: the charge in check() is all a collective does, and
  // what it writes holds no values.
  template <typename HostCall>
  static WorkPtr run(HostCall&& host_call, std::vector<at::Tensor> outputs) {
    if (time_only()) {
      for (const at::Tensor& t : outputs) {
        if (on_neuron(t)) set_holds_values(t.storage(), false);
      }
      return c10::make_intrusive<NeuronWork>(nullptr, std::move(outputs));
    }
    return c10::make_intrusive<NeuronWork>(host_call(), std::move(outputs));
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  py::object* hook_;  // owned; see the destructor
};

}  // namespace

void init_distributed_bindings(py::module_ m) {
  if (py::hasattr(m, "_NeuronBackend")) return;
  py::class_<NeuronBackend, c10d::Backend, c10::intrusive_ptr<NeuronBackend>>(m, "_NeuronBackend")
      .def(py::init<c10::intrusive_ptr<c10d::Backend>, py::object>(), py::arg("host_backend"),
           py::arg("hook"));
}

}  // namespace neuron
