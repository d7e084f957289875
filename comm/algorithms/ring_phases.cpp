#include "comm/algorithms/ring_phases.h"

#include <cstring>

#include "comm/algorithms/scratch.h"

namespace strait::comm {
namespace {

int wrap(int i, int p) {
  return (i % p + p) % p;
}

// Reduce-scatter: step k sends block r-k-1's partial (this rank's own block at step 0, else what
// step k-1 reduced) and receives block r-k-2's into the other of two slots, then reduces this
// rank's contribution into it (or, for block r, the partial into `own`).
class ReduceScatterPolicy final : public RingEngine::Policy {
 public:
  ReduceScatterPolicy(RingOp::ReduceScatterPhase& s, int rank, int size)
      : s_(s), r_(rank), p_(size), elem_(kernels::dtype_size(s.dtype)) {}

  RingEngine::Landing landing(std::size_t unit) override {
    const int k = static_cast<int>(unit);
    const int recv_block = wrap(r_ - k - 2, p_);
    // Where the transport reads the partial from the sender's memory it reduces it on arrival:
    // into the slot from this rank's block (what arrived() does from the slot), or into `own`.
    std::byte* into = recv_block == r_ ? s_.own : slot(k);
    const std::byte* from = recv_block == r_ ? s_.own : block(recv_block);
    return {slot(k), count(recv_block) * elem_, s_.scratch,
            ReduceOnArrival{s_.dtype, elementwise(), into, from}};
  }
  void arrived(std::size_t unit) override {
    const int k = static_cast<int>(unit);
    const int recv_block = wrap(r_ - k - 2, p_);
    const auto op = elementwise();
    if (recv_block == r_) {
      kernels::reduce(s_.dtype, op, s_.own, slot(k), count(r_));
    } else {
      kernels::reduce(s_.dtype, op, slot(k), block(recv_block), count(recv_block));
    }
  }
  RingEngine::Outgoing outgoing(std::size_t unit) override {
    const int k = static_cast<int>(unit);
    const int send_block = wrap(r_ - k - 1, p_);
    const std::byte* data = k == 0 ? block(send_block) : slot(k - 1);
    return {data, count(send_block) * elem_, s_.scratch};
  }

 private:
  [[nodiscard]] const std::byte* block(int b) const {
    return s_.send + s_.blocks.offset[static_cast<std::size_t>(b)] * elem_;
  }
  [[nodiscard]] kernels::ReduceOp elementwise() const {
    return s_.op == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : s_.op;
  }
  [[nodiscard]] std::size_t count(int b) const {
    return s_.blocks.count[static_cast<std::size_t>(b)];
  }
  [[nodiscard]] std::byte* slot(int k) const {
    return s_.scratch.get() + static_cast<std::size_t>(k % 2) * s_.blocks.largest() * elem_;
  }

  RingOp::ReduceScatterPhase& s_;
  int r_;
  int p_;
  std::size_t elem_;
};

// Allgather: step k sends block r-k and receives block r-k-1, in place in the output.
class AllgatherPolicy final : public RingEngine::Policy {
 public:
  AllgatherPolicy(RingOp::AllgatherPhase& s, int rank, int size) : s_(s), r_(rank), p_(size) {}

  RingEngine::Landing landing(std::size_t unit) override {
    const int b = wrap(r_ - static_cast<int>(unit) - 1, p_);
    return {block(b), bytes(b), nullptr};
  }
  void arrived(std::size_t /*unit*/) override {}
  RingEngine::Outgoing outgoing(std::size_t unit) override {
    const int b = wrap(r_ - static_cast<int>(unit), p_);
    return {block(b), bytes(b), nullptr};
  }

 private:
  [[nodiscard]] std::byte* block(int b) const {
    return s_.out + s_.blocks.offset[static_cast<std::size_t>(b)];
  }
  [[nodiscard]] std::size_t bytes(int b) const {
    return s_.blocks.count[static_cast<std::size_t>(b)];
  }

  RingOp::AllgatherPhase& s_;
  int r_;
  int p_;
};

}  // namespace

bool RingOp::advance_phase(Transport& t, ReduceScatterPhase& s) {
  if (s.finished) return true;
  const int p = group().size();
  const int r = group().rank;
  const std::size_t elem = kernels::dtype_size(s.dtype);
  const std::size_t own_count = s.blocks.count[static_cast<std::size_t>(r)];
  if (!s.started) {
    s.started = true;
    // The last step reduces the incoming partial into `own`, which starts as this rank's block.
    const std::byte* mine = s.send + s.blocks.offset[static_cast<std::size_t>(r)] * elem;
    if (own_count != 0 && s.own != mine) std::memcpy(s.own, mine, own_count * elem);
    if (p > 1) s.scratch = scratch_buffer(2 * s.blocks.largest() * elem);
    s.ring.configure(static_cast<std::size_t>(p - 1), 1, 1, s.first_step);
  }
  ReduceScatterPolicy policy(s, r, p);
  if (!s.ring.advance(*this, t, policy)) return false;
  if (s.op == kernels::ReduceOp::Avg && own_count != 0) {
    kernels::scale(s.dtype, s.own, own_count, 1.0 / p);
  }
  s.finished = true;
  return true;
}

bool RingOp::advance_phase(Transport& t, AllgatherPhase& s) {
  const int p = group().size();
  const int r = group().rank;
  if (!s.started) {
    s.started = true;
    std::byte* mine = s.out + s.blocks.offset[static_cast<std::size_t>(r)];
    const std::size_t bytes = s.blocks.count[static_cast<std::size_t>(r)];
    if (s.own_send != mine && bytes != 0) std::memmove(mine, s.own_send, bytes);
    s.ring.configure(static_cast<std::size_t>(p - 1), 1, 1, s.first_step);
  }
  AllgatherPolicy policy(s, r, p);
  return s.ring.advance(*this, t, policy);
}

}  // namespace strait::comm
