// QuorumSync: DiLoCo rounds that close on a quorum instead of waiting for every replica, after
// Decoupled DiLoCo (arXiv 2604.21428): each replica, at the end of its own round, sends its
// pseudo-gradient p = start - w and the tokens it covers to the leader (data-parallel rank 0) and
// takes back the newest global weights. The leader closes a round when Q replicas (itself
// included) have sent and `grace` seconds have passed since its own round ended; the outer step
// uses the token-weighted average of what it holds,
//   delta = sum_i w_i p_i / sum_i w_i,  w_i = tokens_i / (1 + stale_i),
//   m = mu m + delta,  g = g - lr (delta + mu m),
// (stale_i: closes since the weights p_i started from: 0 for a replica answered at the last close),
// and replies with g to the replicas it included. A replica that is late for a round is in the
// next one the leader closes (weighted by the tokens it covers; its p is relative to the older
// weights it started from), so no replica waits for the slowest, only for the leader's close.
// The last round (stop) waits for every live replica and sends all the same final weights; a
// replica that sends nothing within half the communicator's timeout then is declared lost (the
// others' wait for that round's reply must end within the whole of it).
// `strait train --quorum Q --grace S` (train/trainer.cpp) runs it with --stages 1: each replica
// then reports its own figures (no per-step sum over the world), evaluates only at the end, and
// trains until the leader's rounds cover steps x replicas steps' tokens.
// Thread-safety: one thread per rank. Errors: Timeout when fewer than Q replicas sent within the
// communicator's timeout (naming them); InvalidArgument for Q outside [1, replicas], grace < 0,
// or a params span of the wrong size.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"

namespace strait::train {

struct QuorumOptions {
  int quorum = 1;         // Q: replicas that must have sent before a round closes
  double grace_s = 0.0;   // S: seconds the leader waits after its own round end, at least
  double lr = 0.7;        // outer learning rate
  double momentum = 0.9;  // outer Nesterov momentum
};

class QuorumSync {
 public:
  // data: the replicas (rank 0 leads). initial: the weights, identical on every replica.
  QuorumSync(comm::Communicator& data, std::span<const float> initial, QuorumOptions options);
  QuorumSync(const QuorumSync&) = delete;
  QuorumSync& operator=(const QuorumSync&) = delete;
  ~QuorumSync();

  struct Round {
    std::int64_t version = 0;   // outer steps taken so far by the leader
    std::vector<int> included;  // leader: the replicas in the round it closed, with late ones
    std::vector<int> lost;      // leader, at stop: replicas that sent nothing in time
    double tokens = 0;          // leader: the tokens the round's average covers
    bool stop = false;          // the leader ended training: params are the final weights
  };
  // At the end of this replica's round: sends p = start - params for `tokens` tokens and writes
  // the newest global weights into params. stop (leader only): the last round; every live
  // replica is waited for and told to stop.
  Round end_round(std::span<float> params, double tokens, bool stop = false);
  // Leader, after each of its inner steps (no-op elsewhere): takes the pseudo-gradients that have
  // arrived into the next round. One that arrives with more than half of the leader's round left
  // (late for the round just closed) is answered at once with the current global weights, so
  // that replica goes on without waiting for the next close; the others are answered at it.
  void poll(int steps_left, int steps_per_round);

 private:
  struct Inbox;
  Round lead(std::span<float> params, double tokens, bool stop);
  void post_receive(int peer);
  // Leader: takes peer p's arrived message into the pending round (false: nothing or lost).
  bool take(std::size_t p);
  void reply(std::size_t p, bool stop, std::vector<comm::Work>& sends);

  comm::Communicator& data_;
  QuorumOptions options_;
  std::size_t n_;
  std::vector<float> start_, global_, momentum_;
  std::int64_t version_ = 0;
  // Leader: one receive posted per live peer, its buffer, and whether the peer is lost.
  std::vector<std::vector<std::byte>> up_;
  std::vector<comm::Work> receives_;
  std::vector<bool> lost_;
  std::vector<bool> held_;       // taken, to be answered at the close
  std::vector<double> sum_;      // the pending round: sum of tokens x p, in double
  double pending_tokens_ = 0;    // their weights: tokens / (1 + staleness)
  double tokens_in_ = 0;         // the peers' tokens in it
  std::vector<int> pending_in_;  // whose messages are in it (a replica answered early may repeat)
  std::vector<int> pending_lost_;
  std::vector<std::byte> down_;  // the reply: header + the global weights
};

}  // namespace strait::train
