// Op: an operation as the progress engine runs it (comm/progress_engine.h): a state machine
// advanced over a Transport, whatever made it (an algorithm of comm/algorithms/, an NCCL call of
// comm/device_collectives.h). timeout_error() is the Timeout every operation that passes its
// deadline fails with, the engine's and the mailbox's inline path alike.
// Thread-safety: an Op is advanced by one thread at a time (the engine's lock).
#pragma once

#include <chrono>
#include <string>

#include "comm/transport/transport.h"
#include "core/error.h"

namespace strait::comm {

class Op {
 public:
  Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  virtual ~Op() = default;

  // Post what can be posted and check completions without blocking; true when finished.
  // Throws strait::Error when the operation fails (a lost peer, a size mismatch, ...).
  virtual bool advance(Transport& transport) = 0;
  // After a failure: let go of the caller's buffers (Transport::withdraw), so that the caller may
  // free them once the error is reported.
  virtual void cancel(Transport& transport) = 0;
  // What the operation is still waiting for, for Timeout messages ("receive from rank 2 ...").
  [[nodiscard]] virtual std::string waiting_for() const = 0;
  // True for operations whose progress no transport event announces (GPU work, seen through
  // cudaEventQuery): while one is pending the engine polls every kPollInterval instead of
  // sleeping on the transport's event fd.
  [[nodiscard]] virtual bool needs_polling() const noexcept { return false; }
};

// "<description> did not finish within <timeout> ms; still waiting for <waiting_for>. ...".
Error timeout_error(const std::string& description, std::chrono::milliseconds timeout,
                    const std::string& waiting_for);

}  // namespace strait::comm
