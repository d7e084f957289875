// FlightRecorder: a communicator's last N operations (torch's flight recorder, NCCL's RAS), kept
// in a ring so that a hung or failed job can say what every rank did last
// (docs/troubleshooting.md, "A job hangs"; tools/diagnose reads the dumps).
//
// Each entry is one operation as its rank saw it: sequence number (-1 for point to point), kind,
// dtype, count (elements; a v-form's total), bytes of this rank's input, root or peer, tag,
// algorithm, state (enqueued -> started -> finished or failed) and the times of each (steady
// clock, nanoseconds; the dump converts them to Unix time). N is STRAIT_FR_ENTRIES (default
// kDefaultEntries; 0: no recorder at all, and record() is never called).
//
// Times are CLOCK_MONOTONIC_COARSE (the kernel tick, 1-4 ms: fr_now_ns), as cheap as a memory
// read; a completion takes the steady-clock time Work already reads. Cost: an uncontended mutex
// and a coarse clock read per state change, some 30-60 ns per operation;
// tests/comm/flight_recorder_test.cpp measures it and docs/commands/diagnose.md gives the 8-byte
// allreduce with and without it. Entries are updated by id: an operation that finishes after the
// ring wrapped past it changes nothing.
// Thread-safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "comm/algorithms/collective_kind.h"
#include "core/error.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

// Monotonic nanoseconds (steady_clock's origin, the tick's resolution), as FrEntry's times.
[[nodiscard]] std::int64_t fr_now_ns() noexcept;

enum class FrState : std::uint8_t { Enqueued, Started, Finished, Failed };
// "enqueued", "started", "finished", "failed".
[[nodiscard]] std::string_view to_string(FrState state) noexcept;

// One operation. The caller of record() fills what the operation is; the recorder fills id,
// state and the times.
struct FrEntry {
  std::uint64_t id = 0;   // 1, 2, ... in this communicator's recording order (0: empty slot)
  std::int64_t seq = -1;  // the collective's sequence number; -1 for point to point
  CollectiveKind kind = CollectiveKind::Barrier;
  kernels::DType dtype = kernels::DType::U8;
  kernels::ReduceOp op = kernels::ReduceOp::Sum;  // meaningful when the kind reduces
  std::uint64_t count = 0;                        // elements
  std::uint64_t bytes = 0;                        // this rank's input (or output) in bytes
  int root = -1;                                  // rooted kinds; the peer of send and recv
  std::uint64_t tag = 0;                          // point to point
  const char* algorithm = "";                     // static text: "ring", "mailbox", "nccl"
  bool device = false;                            // ran on a GPU through NCCL
  FrState state = FrState::Enqueued;
  std::int64_t enqueued_ns = 0;                // fr_now_ns()
  std::int64_t started_ns = 0;                 // 0 until started
  std::int64_t ended_ns = 0;                   // 0 until finished or failed
  ErrorCode error_code = ErrorCode::Internal;  // when failed
  std::string error{};                         // when failed: the error's message
};

// What a dump says about one communicator.
struct FrSnapshot {
  int comm_id = 0;
  int rank = 0;
  int size = 0;
  std::uint64_t generation = 0;
  int instance = 0;                // FlightRecorder::set_instance
  std::vector<int> world_ranks{};  // the world rank of each of its ranks
  std::size_t capacity = 0;
  std::uint64_t recorded = 0;      // operations recorded since creation (ids 1 .. recorded)
  std::vector<FrEntry> entries{};  // oldest first
};

class FlightRecorder {
 public:
  static constexpr std::size_t kDefaultEntries = 512;
  // STRAIT_FR_ENTRIES, else kDefaultEntries; InvalidArgument on a bad value.
  static std::size_t entries_from_env();

  FlightRecorder(std::size_t capacity, int comm_id, int rank, std::vector<int> world_ranks,
                 std::uint64_t generation);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;
  FlightRecorder(FlightRecorder&&) = delete;
  FlightRecorder& operator=(FlightRecorder&&) = delete;
  ~FlightRecorder() = default;

  // Records `entry` (its id, state and times are set here: Enqueued now, or Started now when
  // `started`). Returns its id.
  std::uint64_t record(FrEntry entry, bool started = false);
  // State changes of the operation `id`; no-ops when the ring has dropped it.
  void started(std::uint64_t id);
  void finished(std::uint64_t id, std::int64_t now_ns = fr_now_ns());
  void failed(std::uint64_t id, const Error& error);

  // Forgets every entry and numbers from 1 again: create() numbers the caller's operations from 0
  // again after its own setup collectives.
  void clear();
  // The how-manieth communicator of this id and generation in this process (0, 1, ...): torch
  // creates every process group with id 0, in the same order on every rank.
  void set_instance(int instance) noexcept { instance_ = instance; }

  [[nodiscard]] FrSnapshot snapshot() const;
  [[nodiscard]] int comm_id() const noexcept { return comm_id_; }
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  // The world rank of this process (its rank in the world this communicator came from).
  [[nodiscard]] int world_rank() const noexcept { return world_ranks_[rank_]; }
  // True once: for the first failure that dumps (comm/flight_dump.h).
  [[nodiscard]] bool first_failure() noexcept { return !failure_seen_.exchange(true); }

 private:
  FrEntry* find(std::uint64_t id);  // with mutex_ held

  const int comm_id_;
  const int rank_;
  const std::vector<int> world_ranks_;
  const std::uint64_t generation_;
  mutable std::mutex mutex_;
  std::vector<FrEntry> ring_;
  std::uint64_t next_id_ = 1;
  std::atomic<bool> failure_seen_{false};
  std::atomic<int> instance_{0};
};

}  // namespace strait::comm
