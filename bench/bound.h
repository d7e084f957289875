// strait-bench --bound: the memory's limit for each collective, measured in the same run. Ranks on
// one host move their bytes through the memory they share, so a collective can go no faster than
// its algorithm's memory traffic (bytes read + written per rank) allows at the copy bandwidth the
// ranks get while all of them copy at once. The derivation per collective is in
// docs/commands/bench.md ("The bound").
//
// Model: a rank copying b bytes moves 2b (reads b, writes b); the copy rate c (bytes copied per
// second per rank, all P ranks copying 64 MiB-ish buffers at once) thus gives 2c of traffic per
// rank. A collective of `size` bytes (nccl-tests' size column) whose busiest rank moves
// T(size, P) bytes takes at least T / (2c): its bound busbw is size / (T / 2c) * bus factor.
// T counts a single-copy algorithm (peers' data read where it lies, reduced as it is read, each
// result written once): the least any local algorithm moves, not what strait's current one does.
// Thread-safety: stateless functions; measure_copy() is collective over the communicator.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>

#include "comm/communicator.h"

namespace strait::bench {

// Bytes read + written by the busiest rank of a single-copy `collective` of `bytes` (the size
// column) over `ranks` ranks; nullopt for a collective without a derivation. `in_place`: the form
// with one buffer (allgather and alltoall then skip the copy of the rank's own block).
std::optional<double> bytes_moved_per_rank(std::string_view collective, std::size_t bytes,
                                           int ranks, bool in_place);

// The bound busbw (GB/s) of a collective moving `moved` bytes per rank at copy rate `copy_gbs`
// (GB/s copied per rank): bytes / (moved / (2 copy_gbs)) * bus_factor. 0 when moved is 0.
double bound_busbw_gbs(std::size_t bytes, double moved, double bus_factor, double copy_gbs);

// The copy rate every rank sees while all copy at once.
struct CopyRate {
  double mean_gbs = 0;  // per rank, the mean over ranks: the rate the bound uses
  double min_gbs = 0;   // the slowest rank's
  double max_gbs = 0;   // the fastest rank's
};

// Buffers for measure_copy(), allocated and touched once (no page fault is timed).
class CopyBuffers {
 public:
  explicit CopyBuffers(std::size_t bytes);
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  std::byte* src() noexcept { return src_.get(); }
  std::byte* dst() noexcept { return dst_.get(); }

 private:
  std::size_t bytes_;
  std::unique_ptr<std::byte[]> src_;
  std::unique_ptr<std::byte[]> dst_;
};

// Collective: every rank copies `b.bytes()` bytes once untimed, then, after a barrier, `iters`
// times timed (memcpy, as the ranks' own copies); the rates are combined over ranks.
CopyRate measure_copy(comm::Communicator& comm, CopyBuffers& b, int iters);

}  // namespace strait::bench
