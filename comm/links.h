// The link probe: latency and bandwidth of every pair of ranks, measured over the Communicator's
// point-to-point path (what the collectives use). Step 1 of `strait tune`, and what
// STRAIT_SITES=measure runs at creation (comm/sites.h clusters the result).
//
// Pairs are scheduled as a round-robin tournament (the circle method: world - 1 rounds for an even
// world, world for an odd one, each rank in at most one pair per round, a barrier between rounds),
// so no rank takes part in two tests at once. In each pair the lower rank leads:
//   latency:   8-byte ping-pongs; one-way latency = median round trip / 2;
//   bandwidth: `bulk_bytes` sent one way, answered by an 8-byte ack; bytes / (time - one-way
//              latency), the best of `bulk_reps` (after one unmeasured transfer).
// Collective: every rank calls it with the same options, and every rank returns the same matrices.
// Tags 0x7e0001..3 of the point-to-point tag space: nothing else may send meanwhile.
// Errors: those of the Communicator. Internal to the static layers (not in libstrait.so's API).
#pragma once

#include <cstddef>
#include <vector>

namespace strait::comm {

class Communicator;

struct Links {
  std::vector<std::vector<double>> latency_us{};      // one way, microseconds; 0 on the diagonal
  std::vector<std::vector<double>> bandwidth_MBps{};  // 10^6 bytes/s; 0 on the diagonal
};

struct LinkOptions {
  int pings = 50;                    // timed ping-pongs per pair (after 5 warm-up ones)
  std::size_t bulk_bytes = 4 << 20;  // bytes per bandwidth transfer
  int bulk_reps = 3;                 // timed transfers per pair
};

// The number of rounds of a tournament of `world` ranks, and rank's partner in `round`, -1 for a
// bye (odd worlds). Every pair i < j meets exactly once.
int tournament_rounds(int world);
int tournament_partner(int rank, int round, int world);

Links measure_links(Communicator& comm, const LinkOptions& options = {});

}  // namespace strait::comm
