#include "bench/bound.h"

#include <chrono>
#include <cstring>
#include <memory>

namespace strait::bench {

std::optional<double> bytes_moved_per_rank(std::string_view collective, std::size_t bytes,
                                           int ranks, bool in_place) {
  const double n = static_cast<double>(bytes);
  const double p = ranks;
  // Derivations: docs/commands/bench.md, "The bound".
  if (collective == "allreduce" || collective == "reduce") {
    // Reduce chunk r of all P inputs (read n, write n / P), then read the P - 1 reduced chunks
    // of the peers and write them (reduce: on the root, the busiest rank).
    return n + n / p + 2 * (p - 1) * n / p;
  }
  // Read P blocks of n / P, write one.
  if (collective == "reduce_scatter" || collective == "reduce_scatter_v") return n + n / p;
  if (collective == "allgather" || collective == "alltoall" || collective == "gather" ||
      collective == "allgather_v" || collective == "alltoall_v") {
    // Read the P - 1 peers' blocks of n / P and write them; out of place also copy one's own
    // (gather: on the root, the busiest rank).
    return 2 * (p - 1) * n / p + (in_place ? 0.0 : 2 * n / p);
  }
  // Each rank reads its block of n / P from the root and writes it (the root out of place copies
  // its own: as much).
  if (collective == "scatter") return 2 * n / p;
  if (collective == "broadcast" || collective == "sendrecv") return 2 * n;  // read n, write n
  return std::nullopt;
}

double bound_busbw_gbs(std::size_t bytes, double moved, double bus_factor, double copy_gbs) {
  if (moved <= 0 || copy_gbs <= 0) return 0;
  const double seconds = moved / (2 * copy_gbs * 1e9);
  return static_cast<double>(bytes) / seconds / 1e9 * bus_factor;
}

CopyBuffers::CopyBuffers(std::size_t bytes)
    : bytes_(bytes),
      src_(std::make_unique<std::byte[]>(bytes)),  // value-initialised: every page touched
      dst_(std::make_unique<std::byte[]>(bytes)) {
  std::memset(src_.get(), 1, bytes_);
}

CopyRate measure_copy(comm::Communicator& comm, CopyBuffers& b, int iters) {
  std::memcpy(b.dst(), b.src(), b.bytes());
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) std::memcpy(b.dst(), b.src(), b.bytes());
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  const double mine = static_cast<double>(b.bytes()) * iters / took.count() / 1e9;
  CopyRate r{.mean_gbs = mine, .min_gbs = mine, .max_gbs = mine};
  comm.allreduce(&r.mean_gbs, &r.mean_gbs, 1, kernels::DType::F64, kernels::ReduceOp::Avg);
  comm.allreduce(&r.min_gbs, &r.min_gbs, 1, kernels::DType::F64, kernels::ReduceOp::Min);
  comm.allreduce(&r.max_gbs, &r.max_gbs, 1, kernels::DType::F64, kernels::ReduceOp::Max);
  return r;
}

}  // namespace strait::bench
