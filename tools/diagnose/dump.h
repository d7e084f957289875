// A flight-recorder dump as `strait diagnose` reads it: the JSON file one process writes
// (comm/flight_dump.h; docs/troubleshooting.md documents the format), parsed into plain values.
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strait::tools::diagnose {

struct Entry {
  std::uint64_t id = 0;
  std::int64_t seq = -1;  // -1: point to point
  std::string kind, dtype, op, algorithm, state, error_code, error;
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  int root = -1;  // rooted kinds
  int peer = -1;  // send, recv
  std::uint64_t tag = 0;
  std::int64_t enqueued_ns = 0, started_ns = 0, ended_ns = 0;  // Unix time; 0: not yet

  [[nodiscard]] bool collective() const noexcept { return seq >= 0; }
  [[nodiscard]] bool pending() const noexcept { return state == "enqueued" || state == "started"; }
  [[nodiscard]] bool ended() const noexcept { return state == "finished" || state == "failed"; }
  // "allreduce #57 (f32 x 2, sum, ring)", "recv from 1 (tag 3, 4096 B)".
  [[nodiscard]] std::string describe() const;
  // What ranks must agree on: kind, dtype, count, op, root.
  [[nodiscard]] std::string signature() const;
};

struct Comm {
  int comm_id = 0;
  int rank = 0;
  int size = 0;
  std::uint64_t generation = 0;
  int instance = 0;  // the how-manieth communicator of this id in its process
  std::vector<int> world_ranks{};
  std::uint64_t recorded = 0;
  std::vector<Entry> entries{};  // oldest first
};

struct Dump {
  std::string file;
  int rank = 0;  // world rank
  std::string host;
  long pid = 0;
  std::string job, trigger, reason;
  std::int64_t time_ns = 0;
  std::vector<Comm> comms{};
};

// Parses one dump; InvalidArgument naming `file` and what is wrong.
Dump parse_dump(const std::string& text, const std::string& file);

}  // namespace strait::tools::diagnose
