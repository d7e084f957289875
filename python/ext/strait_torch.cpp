// _strait_torch: the compiled half of strait's torch.distributed backend (python/strait/torch).
//
// Why it exists: torch 1.13 hands C++ callers (DDP's Reducer, _broadcast_coalesced) only C++
// Works. The pure-Python path builds one from a torch Future that a Python thread fulfils:
// 230 - 430 us of the autograd thread's CPU per DDP bucket (docs/results/torch.md). Here a
// submitted strait request becomes a c10d::Work whose future a C++ thread completes, with no GIL
// and no Python object per operation.
//
// API (module _strait_torch, loaded by python/strait/torch/_work.py from next to libstrait.so):
//   Completer()                      one per ProcessGroup; a thread that waits on requests in
//                                    submission order (strait finishes a group's operations in
//                                    that order) and completes their futures.
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
// Completer's thread, which runs their C++ callbacks (as Gloo's and NCCL's threads do).
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>
#include <torch/version.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strait/strait.h>

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

struct Pending {
  straitRequest_t request = nullptr;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::vector<at::Tensor> result;
  std::string name;
};

// The queue and its thread. The state is shared with the thread, which may outlive the Python
// object by the time its last request ends.
class Completer {
 public:
  Completer() : state_(std::make_shared<State>()) {
    std::thread(&Completer::run, state_).detach();
  }
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;
  Completer(Completer&&) = delete;
  Completer& operator=(Completer&&) = delete;
  ~Completer() { stop(); }

  c10::intrusive_ptr<c10d::Work> work(std::uintptr_t request, std::vector<at::Tensor> result,
                                      std::string name) {
    auto future = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()));
    auto handle = reinterpret_cast<straitRequest_t>(request);  // NOLINT(performance-no-int-to-ptr)
    auto work = c10::make_intrusive<FutureWork>(future, result);
    {
      std::lock_guard lock(state_->mutex);
      if (state_->stopped) {
        straitRequestFree(handle);  // refuses a running request: then it leaks, as documented
        throw std::runtime_error("strait: " + name + ": the process group was shut down");
      }
      state_->queue.push_back(Pending{handle, std::move(future), std::move(result),
                                      std::move(name)});
    }
    state_->ready.notify_one();
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
  struct State {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<Pending> queue;
    bool stopped = false;
    std::vector<std::vector<at::Tensor>> failed;  // buffers of failed operations, kept
  };

  static void run(const std::shared_ptr<State>& state) {
    for (;;) {
      Pending next;
      {
        std::unique_lock lock(state->mutex);
        state->ready.wait(lock, [&] { return state->stopped || !state->queue.empty(); });
        if (state->queue.empty()) {
          return;  // stopped and drained
        }
        next = std::move(state->queue.front());
        state->queue.pop_front();
      }
      complete(*state, next);
    }
  }

  static void complete(State& state, Pending& op) {
    const straitResult_t rc = straitWait(op.request, STRAIT_WAIT_DEADLINE);
    if (rc == straitSuccess) {
      straitRequestFree(op.request);
      op.future->markCompleted(c10::IValue(op.result));
      return;
    }
    const char* detail = straitRequestGetError(op.request);
    std::string message = "strait: " + op.name + " failed: " +
                          (detail != nullptr ? detail : straitGetErrorString(rc));
    straitRequestFree(op.request);
    {
      std::lock_guard lock(state.mutex);
      state.failed.push_back(std::move(op.result));
    }
    op.future->setError(std::make_exception_ptr(std::runtime_error(message)));
  }

  std::shared_ptr<State> state_;
};

}  // namespace

PYBIND11_MODULE(_strait_torch, m) {
  m.doc() = "The compiled half of strait's torch backend: C++ Works completed by a C++ thread.";
  m.attr("TORCH_VERSION") = std::to_string(TORCH_VERSION_MAJOR) + "." +
                           std::to_string(TORCH_VERSION_MINOR);
  // The Work type torch registered (torch._C._distributed_c10d.Work) is what callers receive.
  pybind11::module_::import("torch.distributed");
  pybind11::class_<Completer, std::shared_ptr<Completer>>(m, "Completer")
      .def(pybind11::init<>())
      .def("work", &Completer::work, pybind11::arg("request"), pybind11::arg("result"),
           pybind11::arg("name"), pybind11::call_guard<pybind11::gil_scoped_release>(),
           "A c10d Work over a submitted strait request; see the file's header.")
      .def("stop", &Completer::stop, pybind11::call_guard<pybind11::gil_scoped_release>());
}
