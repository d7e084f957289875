#include "comm/flight_recorder.h"

#include <time.h>

#include <chrono>
#include <utility>

#include "core/params.h"

namespace strait::comm {

std::string_view to_string(FrState state) noexcept {
  switch (state) {
    case FrState::Enqueued: return "enqueued";
    case FrState::Started: return "started";
    case FrState::Finished: return "finished";
    case FrState::Failed: return "failed";
  }
  return "unknown";
}

std::int64_t fr_now_ns() noexcept {
  // CLOCK_MONOTONIC_COARSE: 4 ns a read where CLOCK_MONOTONIC (steady_clock) costs 30-40 in a VM,
  // with the same origin, at the kernel tick's resolution (1-4 ms): enough to order a hang's
  // events across ranks and say how long a rank waited, which is what the recorder is for.
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::size_t FlightRecorder::entries_from_env() {
  return static_cast<std::size_t>(
      params::get_int("STRAIT_FR_ENTRIES", 0, 1 << 20).value_or(kDefaultEntries));
}

FlightRecorder::FlightRecorder(std::size_t capacity, int comm_id, int rank,
                               std::vector<int> world_ranks, std::uint64_t generation)
    : comm_id_(comm_id),
      rank_(rank),
      world_ranks_(std::move(world_ranks)),
      generation_(generation),
      ring_(capacity) {}

std::uint64_t FlightRecorder::record(FrEntry entry, bool started) {
  const std::int64_t now = fr_now_ns();
  entry.enqueued_ns = now;
  entry.started_ns = started ? now : 0;
  entry.state = started ? FrState::Started : FrState::Enqueued;
  const std::lock_guard lock(mutex_);
  entry.id = next_id_++;
  ring_[entry.id % ring_.size()] = std::move(entry);
  return next_id_ - 1;
}

FrEntry* FlightRecorder::find(std::uint64_t id) {
  FrEntry& e = ring_[id % ring_.size()];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::started(std::uint64_t id) {
  const std::int64_t now = fr_now_ns();
  const std::lock_guard lock(mutex_);
  if (FrEntry* e = find(id); e != nullptr && e->state == FrState::Enqueued) {
    e->state = FrState::Started;
    e->started_ns = now;
  }
}

void FlightRecorder::finished(std::uint64_t id, std::int64_t now) {
  const std::lock_guard lock(mutex_);
  if (FrEntry* e = find(id); e != nullptr) {
    if (e->started_ns == 0) e->started_ns = now;  // completed before the engine said it started
    e->state = FrState::Finished;
    e->ended_ns = now;
  }
}

void FlightRecorder::failed(std::uint64_t id, const Error& error) {
  const std::int64_t now = fr_now_ns();
  const std::lock_guard lock(mutex_);
  if (FrEntry* e = find(id); e != nullptr) {
    e->state = FrState::Failed;
    e->ended_ns = now;
    e->error_code = error.code();
    e->error = error.message();
  }
}

void FlightRecorder::clear() {
  const std::lock_guard lock(mutex_);
  for (FrEntry& e : ring_) e = FrEntry{};
  next_id_ = 1;  // the setup's operations have all completed: no update can name an old id
}

FrSnapshot FlightRecorder::snapshot() const {
  FrSnapshot s{.comm_id = comm_id_,
               .rank = rank_,
               .size = static_cast<int>(world_ranks_.size()),
               .generation = generation_,
               .instance = instance_.load(),
               .world_ranks = world_ranks_,
               .capacity = ring_.size()};
  const std::lock_guard lock(mutex_);
  s.recorded = next_id_ - 1;
  const std::uint64_t first = s.recorded >= ring_.size() ? s.recorded - ring_.size() + 1 : 1;
  s.entries.reserve(static_cast<std::size_t>(s.recorded - first + 1));
  for (std::uint64_t id = first; id <= s.recorded; ++id) {
    const FrEntry& e = ring_[id % ring_.size()];
    if (e.id == id) s.entries.push_back(e);  // not cleared
  }
  return s;
}

}  // namespace strait::comm
