#include "comm/links.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>

#include "comm/communicator.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Point-to-point tags of the tuner (collectives do not use tags; other tools do not run meanwhile).
constexpr std::uint64_t kTagPing = 0x7e0001;
constexpr std::uint64_t kTagBulk = 0x7e0002;
constexpr std::uint64_t kTagAck = 0x7e0003;
constexpr int kWarmupPings = 5;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int tournament_rounds(int world) {
  if (world < 2) return 0;
  return world % 2 == 0 ? world - 1 : world;
}

int tournament_partner(int rank, int round, int world) {
  // Circle method over m = world rounded up to even players; player m - 1 stays put, the others
  // rotate: in round r, r meets m - 1 and i meets (2r - i) mod (m - 1).
  const int m = world % 2 == 0 ? world : world + 1;
  int partner = 0;
  if (rank == m - 1) {
    partner = round;
  } else if (rank == round) {
    partner = m - 1;
  } else {
    partner = ((2 * round - rank) % (m - 1) + (m - 1)) % (m - 1);
  }
  return partner >= world ? -1 : partner;
}

Links measure_links(Communicator& comm, const LinkOptions& options) {
  const int n = comm.size();
  const int me = comm.rank();
  const auto at = [n](int i, int j) {
    return static_cast<std::size_t>(i) * static_cast<std::size_t>(n) + static_cast<std::size_t>(j);
  };
  std::vector<double> latency(static_cast<std::size_t>(n) * n, 0.0);
  std::vector<double> bandwidth(latency.size(), 0.0);
  std::array<std::byte, 8> small{};
  std::vector<std::byte> bulk(options.bulk_bytes);

  for (int round = 0; round < tournament_rounds(n); ++round) {
    const int peer = tournament_partner(me, round, n);
    if (peer >= 0 && me < peer) {
      std::vector<double> rtts;
      for (int i = 0; i < kWarmupPings + options.pings; ++i) {
        const auto t0 = Clock::now();
        comm.send(small.data(), small.size(), peer, kTagPing);
        comm.recv(small.data(), small.size(), peer, kTagPing);
        if (i >= kWarmupPings) rtts.push_back(seconds_since(t0));
      }
      const double one_way = median(rtts) / 2;
      double best = 0;
      for (int i = 0; i <= options.bulk_reps; ++i) {
        const auto t0 = Clock::now();
        comm.send(bulk.data(), bulk.size(), peer, kTagBulk);
        comm.recv(small.data(), small.size(), peer, kTagAck);
        const double t = std::max(seconds_since(t0) - one_way, 1e-9);
        if (i > 0) best = std::max(best, static_cast<double>(bulk.size()) / t);
      }
      latency[at(me, peer)] = latency[at(peer, me)] = one_way * 1e6;
      bandwidth[at(me, peer)] = bandwidth[at(peer, me)] = best / 1e6;
    } else if (peer >= 0) {
      for (int i = 0; i < kWarmupPings + options.pings; ++i) {
        comm.recv(small.data(), small.size(), peer, kTagPing);
        comm.send(small.data(), small.size(), peer, kTagPing);
      }
      for (int i = 0; i <= options.bulk_reps; ++i) {
        comm.recv(bulk.data(), bulk.size(), peer, kTagBulk);
        comm.send(small.data(), small.size(), peer, kTagAck);
      }
    }
    comm.barrier();  // the next round's pairs start together, on quiet links
  }
  // Each pair was written by its leader only: a sum gives every rank the whole matrices.
  comm.allreduce(latency.data(), latency.data(), latency.size(), kernels::DType::F64,
                 kernels::ReduceOp::Sum);
  comm.allreduce(bandwidth.data(), bandwidth.data(), bandwidth.size(), kernels::DType::F64,
                 kernels::ReduceOp::Sum);
  Links links;
  for (int i = 0; i < n; ++i) {
    links.latency_us.emplace_back(latency.begin() + static_cast<std::ptrdiff_t>(at(i, 0)),
                                  latency.begin() + static_cast<std::ptrdiff_t>(at(i, n)));
    links.bandwidth_MBps.emplace_back(bandwidth.begin() + static_cast<std::ptrdiff_t>(at(i, 0)),
                                      bandwidth.begin() + static_cast<std::ptrdiff_t>(at(i, n)));
  }
  return links;
}

}  // namespace strait::comm
