// RingEngine: the pipelined ring every ring collective runs on (ring allreduce, the compressed
// ring, reduce-scatter, allgather and the hierarchical allreduce's site ring), written once, as
// NCCL's runRing is a list of steps over its primitives and UCC's ring allreduce is its
// reduce-scatter and allgather tasks. A collective gives the engine a Policy: where each incoming
// message lands, what to do once it has (reduce, decode-and-add, copy, keep to forward), and what
// each outgoing message is; the engine owns the segments, the window and the tags.
//
// A ring run is `steps` steps of `segments` segments each; a unit is (step, segment), numbered
// step * segments + segment, and unit u is one message from the left neighbour and one to the
// right. Rules, the same for every policy:
//   - unit u's send goes once unit u - segments (the same segment of the previous step) has
//     arrived and been handled: what it forwards is ready;
//   - at most `window` units are in flight each way, and a receive is posted at most `window`
//     units ahead of both the receives and the sends. Unsegmented (window 1), a step's receive
//     therefore waits for the previous step's send, so a rank waits on one peer at a time and
//     names the right one when it is lost;
//   - arrivals are handled in unit order;
//   - unit u's tag step (comm/transport/tag.h) is (first_step + u) modulo the steps a tag can name:
//   units
//     that share one are 65535 units apart, with at most 2 * window in flight.
// Thread-safety: driven by the progress engine, one thread at a time, as every Op.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>

#include "comm/transport/transport.h"

namespace strait::comm {

class CollectiveOp;

class RingEngine {
 public:
  // A message's bytes, and what keeps them alive while UCX may still read or write them (a failed
  // operation can go before a matched receive lands or a queued send is read). Null: the
  // caller's buffer, which outlives the operation by contract.
  // `reduce`: the transport may reduce the message on arrival instead (Transport::irecv_reduce);
  // when it has, arrived() is not called for the unit.
  struct Landing {
    std::byte* data = nullptr;
    std::size_t bytes = 0;
    std::shared_ptr<const void> keep{};
    std::optional<ReduceOnArrival> reduce{};
  };
  struct Outgoing {
    const std::byte* data = nullptr;
    std::size_t bytes = 0;
    std::shared_ptr<const void> keep{};
  };

  class Policy {
   public:
    Policy() = default;
    Policy(const Policy&) = default;
    Policy& operator=(const Policy&) = default;
    Policy(Policy&&) = default;
    Policy& operator=(Policy&&) = default;
    virtual ~Policy() = default;
    // Where unit u's incoming message lands; its size is what the left neighbour sends.
    virtual Landing landing(std::size_t unit) = 0;
    // Unit u's message has landed (units in order): reduce it, decode it, keep it to forward. Not
    // called when the transport reduced it as its landing asked.
    virtual void arrived(std::size_t unit) = 0;
    // Unit u's outgoing message, asked for once its send may go (see the rules above).
    virtual Outgoing outgoing(std::size_t unit) = 0;
    // Whether unit u's receive may be posted once `sent` units' sends have completed: false while
    // it would land where a send still in flight reads (the allreduce's allgather half).
    [[nodiscard]] virtual bool may_receive(std::size_t /*unit*/, std::size_t /*sent*/) const {
      return true;
    }
  };

  RingEngine() = default;
  // Before the first advance(). first_step: the tag step of unit 0.
  void configure(std::size_t steps, std::size_t segments, std::size_t window, int first_step = 0);

  // Posts and completes what it can; true once every unit has been sent and received and every
  // message of `op` has completed. Throws as CollectiveOp::all_done does (a lost peer, a message of
  // the wrong size) and whatever the policy throws.
  bool advance(CollectiveOp& op, Transport& t, Policy& policy);

  [[nodiscard]] std::size_t segments() const noexcept { return segments_; }
  [[nodiscard]] std::size_t units() const noexcept { return units_; }

 private:
  [[nodiscard]] int tag_step(std::size_t unit) const;

  std::size_t segments_ = 1;
  std::size_t units_ = 0;
  std::size_t window_ = 1;
  int first_step_ = 0;
  std::size_t received_ = 0;  // units received and handled, in order
  std::size_t recv_posted_ = 0;
  std::size_t sent_ = 0;  // units whose send completed, in order
  std::size_t send_posted_ = 0;
  std::deque<RequestPtr> recvs_;  // units received_ .. recv_posted_ - 1
  std::deque<RequestPtr> sends_;  // units sent_ .. send_posted_ - 1
};

}  // namespace strait::comm
