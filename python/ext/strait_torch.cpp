// _strait_torch: the compiled half of strait's torch.distributed backend (python/strait/torch).
//
// Why it exists: torch 1.13 hands C++ callers (DDP's Reducer, _broadcast_coalesced) only C++
// Works. The pure-Python path builds one from a torch Future that a Python thread fulfils:
// 230 - 430 us of the autograd thread's CPU per DDP bucket (docs/results/torch.md). Here a
// submitted strait request becomes a c10d::Work whose future a C++ thread completes, with no GIL
// and no Python object per operation.
//
// API (module _strait_torch, loaded by python/strait/torch/_work.py from next to libstrait.so):
//   Completer()                      one per ProcessGroup; a thread that completes the futures of
//                                    the operations strait reports finished
//                                    (straitRequestOnComplete), sleeping in between.
//   Completer.work(request, result, name) -> torch._C._distributed_c10d.Work
//       request: an int, a straitRequest_t from an ...Async call; the Completer owns it from
//       here (frees it). result: list of tensors, the operation's outputs, also kept alive until
//       it ends (after a failure until the Completer is destroyed: UCX cannot cancel a receive
//       in flight). The Work's future completes with `result` or fails with strait's message
//       ("strait: NAME failed: ...").
//   Completer.stop()                 no more works; the thread ends after the queued ones
//                                    (which fail with straitAborted once the communicator is
//                                    destroyed). Called before straitCommDestroy.
//   TORCH_VERSION                    "MAJOR.MINOR" of the torch it was compiled against.
// Thread-safety: work() and stop() may be called from any thread. Futures complete on the
// Completer's thread, which runs their C++ callbacks (as Gloo's and NCCL's threads do), not on
// strait's progress thread.
#include <strait/strait.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/extension.h>
#include <torch/version.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

namespace {

// A Work over a future that the Completer fulfils; wait() and the getters only read the future.
class FutureWork final : public c10d::Work {
 public:
  FutureWork(c10::intrusive_ptr<c10::ivalue::Future> future, std::vector<at::Tensor> result)
      : future_(std::move(future)), result_(std::move(result)) {}

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
  }
  std::vector<at::Tensor> result() override { return result_; }
  void synchronize() override {}
  // The operation's own deadline (the group's timeout) bounds the wait; a shorter one cannot
  // abandon a single strait operation, so the group's timeout is the one that applies.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    future_->wait();
    if (future_->hasError()) {
      std::rethrow_exception(future_->exception_ptr());
    }
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::vector<at::Tensor> result_;
};

// One operation in flight. Owned by the Completer's State from work() until its future is
// completed; strait's completion callback only hands it to the Completer's thread.
struct Pending {
  straitRequest_t request = nullptr;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::vector<at::Tensor> result;
  std::string name;
  straitResult_t rc = straitSuccess;
  struct State* state = nullptr;
};

struct State {
  std::mutex mutex;
  std::condition_variable ready;
  std::map<Pending*, std::unique_ptr<Pending>> inflight;
  std::deque<Pending*> finished;  // handed over by completion callbacks
  bool stopped = false;
  std::vector<std::vector<at::Tensor>> failed;  // buffers of failed operations, kept
};

// strait's completion callback (straitRequestOnComplete): runs on the thread that finished the
// operation, which moves every rank's bytes, so it only queues the operation.
void on_complete(void* user, straitResult_t rc) {
  auto* op = static_cast<Pending*>(user);
  State& state = *op->state;
  {
    std::lock_guard lock(state.mutex);
    op->rc = rc;
    state.finished.push_back(op);
  }
  state.ready.notify_one();
}

// The queue and its thread. The thread sleeps until a completion callback wakes it (no polling:
// a thread polling beside backward takes the compute's CPU). The state is shared with the
// thread, which may outlive the Python object until the operations in flight end.
class Completer {
 public:
  Completer() : state_(std::make_shared<State>()) { std::thread(&Completer::run, state_).detach(); }
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;
  Completer(Completer&&) = delete;
  Completer& operator=(Completer&&) = delete;
  ~Completer() { stop(); }

  c10::intrusive_ptr<c10d::Work> work(std::uintptr_t request, std::vector<at::Tensor> result,
                                      std::string name) {
    auto future =
        c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    auto work = c10::make_intrusive<FutureWork>(future, result);
    auto op = std::make_unique<Pending>();
    op->request = reinterpret_cast<straitRequest_t>(request);  // NOLINT(performance-no-int-to-ptr)
    op->future = std::move(future);
    op->result = std::move(result);
    op->name = std::move(name);
    op->state = state_.get();
    Pending* raw = op.get();
    {
      std::lock_guard lock(state_->mutex);
      if (state_->stopped) {  // the operation runs on: keep its buffers, drop the handle
        state_->failed.push_back(raw->result);
        straitRequestFree(raw->request);
        throw std::runtime_error("strait: " + raw->name + ": the process group was shut down");
      }
      state_->inflight.emplace(raw, std::move(op));
    }
    const straitResult_t rc = straitRequestOnComplete(raw->request, &on_complete, raw);
    if (rc != straitSuccess) {  // an unknown request: a bug of the caller's
      std::lock_guard lock(state_->mutex);
      std::string message = "strait: " + raw->name + ": " + straitGetErrorString(rc);
      state_->inflight.erase(raw);
      throw std::runtime_error(message);
    }
    return work;
  }

  void stop() {
    {
      std::lock_guard lock(state_->mutex);
      state_->stopped = true;
    }
    state_->ready.notify_one();
  }

 private:
  static void run(const std::shared_ptr<State>& state) {
    for (;;) {
      std::unique_ptr<Pending> op;
      {
        std::unique_lock lock(state->mutex);
        state->ready.wait(lock, [&] {
          return !state->finished.empty() || (state->stopped && state->inflight.empty());
        });
        if (state->finished.empty()) {
          return;  // stopped, and every operation has ended
        }
        Pending* next = state->finished.front();
        state->finished.pop_front();
        auto node = state->inflight.extract(next);
        op = std::move(node.mapped());
      }
      try {
        complete(*state, *op);
      } catch (const std::exception& e) {  // a future's callback threw: nobody else would see it
        std::fprintf(stderr, "strait: completing %s: a callback of its future threw: %s\n",
                     op->name.c_str(), e.what());
      }
    }
  }

  static void complete(State& state, Pending& op) {
    if (op.rc == straitSuccess) {
      straitRequestFree(op.request);
      op.future->markCompleted(c10::IValue(op.result));
      return;
    }
    const char* detail = straitRequestGetError(op.request);
    const std::string message =
        "strait: " + op.name +
        " failed: " + (detail != nullptr && *detail != '\0' ? detail : straitGetErrorString(op.rc));
    straitRequestFree(op.request);
    {
      std::lock_guard lock(state.mutex);
      state.failed.push_back(std::move(op.result));
    }
    op.future->setError(std::make_exception_ptr(std::runtime_error(message)));
  }

  std::shared_ptr<State> state_;
};

// strait's element type for a torch dtype (the Python backend's _REDUCE_DTYPES), if any.
std::optional<straitDataType_t> strait_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return straitFloat32;
    case at::kDouble: return straitFloat64;
    case at::kHalf: return straitFloat16;
    case at::kBFloat16: return straitBfloat16;
    case at::kInt: return straitInt32;
    case at::kLong: return straitInt64;
    case at::kChar: return straitInt8;
    case at::kByte: return straitUint8;
    default: return std::nullopt;
  }
}

// The reductions every dtype above takes; the others (AVG, the bitwise ops, PREMUL_SUM) go to
// the Python backend, which checks them against the dtype and names what is wrong.
std::optional<straitRedOp_t> strait_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return straitSum;
    case c10d::ReduceOp::PRODUCT: return straitProd;
    case c10d::ReduceOp::MIN: return straitMin;
    case c10d::ReduceOp::MAX: return straitMax;
    default: return std::nullopt;
  }
}

// The C++ side of the Python ProcessGroupStrait (python/strait/torch/backend.py derives from it).
// C++ callers (DDP's Reducer) reach allreduce here without entering Python: a dense contiguous
// host tensor with SUM, PRODUCT, MIN or MAX is submitted to strait from C++ and gets a
// FutureWork. Everything else, and every call while a profiler records (its spans are the Python
// backend's), goes on to the Python method, as torch's PyProcessGroup trampoline dispatches
// (the same eight methods it has). Python callers call the Python methods and never come here.
class ProcessGroupNative : public c10d::ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;

  // comm: the group's straitComm_t; completer: its Completer. Called by the Python __init__
  // before the group is used; detach() before the communicator is destroyed.
  void attach(std::uintptr_t comm, std::shared_ptr<Completer> completer) {
    comm_ = reinterpret_cast<straitComm_t>(comm);  // NOLINT(performance-no-int-to-ptr)
    completer_ = std::move(completer);
  }
  void detach() {
    comm_ = nullptr;
    completer_.reset();
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (auto work = submit_allreduce(tensors, opts)) {
      return work;
    }
    return python<c10::intrusive_ptr<c10d::Work>>("allreduce", tensors, opts);
  }

  const std::string getBackendName() const override {
    return python<std::string>("getBackendName");
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    return python<c10::intrusive_ptr<c10d::Work>>("allgather", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return python<c10::intrusive_ptr<c10d::Work>>("barrier", opts);
  }
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    return python<c10::intrusive_ptr<c10d::Work>>("broadcast", tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return python<c10::intrusive_ptr<c10d::Work>>("reduce_scatter", outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    return python<c10::intrusive_ptr<c10d::Work>>("send", tensors, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    return python<c10::intrusive_ptr<c10d::Work>>("recv", tensors, src, tag);
  }

 private:
  // The Python subclass's method `name` called with args (the GIL taken), as PYBIND11_OVERRIDE
  // does; looked up on this class, the one pybind registered for the Python object.
  template <typename Result, typename... Args>
  Result python(const char* name, Args&... args) const {
    pybind11::gil_scoped_acquire gil;
    const pybind11::function method =
        pybind11::get_override(static_cast<const ProcessGroupNative*>(this), name);
    if (!method) {
      throw std::runtime_error(std::string("strait: the process group has no method ") + name);
    }
    return method(args...).template cast<Result>();
  }

  c10::intrusive_ptr<c10d::Work> submit_allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
    if (comm_ == nullptr || !completer_ || tensors.size() != 1 ||
        torch::profiler::impl::profilerEnabled()) {
      return {};
    }
    at::Tensor& t = tensors[0];
    const auto dtype = strait_dtype(t.scalar_type());
    const auto op = strait_op(opts.reduceOp);
    if (!dtype || !op || !t.device().is_cpu() || t.layout() != at::kStrided || !t.is_contiguous()) {
      return {};
    }
    straitRequest_t request = nullptr;
    void* data = t.data_ptr();
    const straitResult_t rc =
        straitAllReduceAsync(data, data, t.numel(), *dtype, *op, comm_, nullptr, &request);
    if (rc != straitSuccess) {
      const char* detail = straitGetLastError(comm_);
      throw std::runtime_error(
          std::string("strait: allreduce failed: ") +
          (detail != nullptr && *detail != '\0' ? detail : straitGetErrorString(rc)));
    }
    return completer_->work(reinterpret_cast<std::uintptr_t>(request), tensors, "allreduce");
  }

  straitComm_t comm_ = nullptr;
  std::shared_ptr<Completer> completer_;
};

}  // namespace

PYBIND11_MODULE(_strait_torch, m) {
  m.doc() = "The compiled half of strait's torch backend: C++ Works completed by a C++ thread.";
  m.attr("TORCH_VERSION") =
      std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  // The Work type torch registered (torch._C._distributed_c10d.Work) is what callers receive.
  pybind11::module_::import("torch.distributed");
  pybind11::class_<Completer, std::shared_ptr<Completer>>(m, "Completer")
      .def(pybind11::init<>())
      .def("work", &Completer::work, pybind11::arg("request"), pybind11::arg("result"),
           pybind11::arg("name"), pybind11::call_guard<pybind11::gil_scoped_release>(),
           "A c10d Work over a submitted strait request; see the file's header.")
      .def("stop", &Completer::stop, pybind11::call_guard<pybind11::gil_scoped_release>());
  pybind11::class_<ProcessGroupNative, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupNative>>(
      m, "ProcessGroupNative",
      "Base of strait's Python ProcessGroup: C++ callers' allreduce without Python.")
      .def(pybind11::init<int, int>(), pybind11::arg("rank"), pybind11::arg("size"))
      .def("_attach", &ProcessGroupNative::attach, pybind11::arg("comm"),
           pybind11::arg("completer"))
      .def("_detach", &ProcessGroupNative::detach);
}
