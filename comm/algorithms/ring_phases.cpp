#include "comm/algorithms/ring_phases.h"

#include <cstring>

#include "comm/algorithms/scratch.h"

namespace strait::comm {
namespace {

int wrap(int i, int p) {
  return (i % p + p) % p;
}

}  // namespace

bool RingOp::advance_phase(Transport& t, ReduceScatterPhase& s) {
  if (s.finished) return true;
  const int p = group().size();
  const int r = group().rank;
  const std::size_t elem = kernels::dtype_size(s.dtype);
  const auto block = [&](int b) {
    return s.send + s.blocks.offset[static_cast<std::size_t>(b)] * elem;
  };
  const auto count = [&](int b) { return s.blocks.count[static_cast<std::size_t>(b)]; };
  const std::size_t slot_bytes = s.blocks.largest() * elem;
  const auto slot = [&](int k) {
    return s.scratch.get() + static_cast<std::size_t>(k % 2) * slot_bytes;
  };
  if (!s.started) {
    s.started = true;
    // The last step reduces the incoming partial into `own`, which starts as this rank's block.
    if (count(r) != 0 && s.own != block(r)) std::memcpy(s.own, block(r), count(r) * elem);
    if (p > 1) s.scratch = scratch_buffer(2 * slot_bytes);
  }
  const auto reduce_op = s.op == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : s.op;
  while (s.step < p - 1) {
    const int k = s.step;
    const int send_block = wrap(r - k - 1, p);
    const int recv_block = wrap(r - k - 2, p);
    if (!s.posted) {
      s.posted = true;
      RequestPtr rx =
          recv_from(t, wrap(r - 1, p), s.first_step + k, slot(k), count(recv_block) * elem);
      rx->keep_alive = s.scratch;
      // Step 0 sends this rank's own contribution; later steps what the previous one reduced.
      const std::byte* outgoing = k == 0 ? block(send_block) : slot(k - 1);
      RequestPtr tx =
          send_to(t, wrap(r + 1, p), s.first_step + k, outgoing, count(send_block) * elem);
      tx->keep_alive = s.scratch;
    }
    if (!all_done(t)) return false;
    s.posted = false;
    ++s.step;
    if (recv_block == r) {
      kernels::reduce(s.dtype, reduce_op, s.own, slot(k), count(r));
    } else {
      kernels::reduce(s.dtype, reduce_op, slot(k), block(recv_block), count(recv_block));
    }
  }
  if (s.op == kernels::ReduceOp::Avg && count(r) != 0) {
    kernels::scale(s.dtype, s.own, count(r), 1.0 / p);
  }
  s.finished = true;
  return true;
}

bool RingOp::advance_phase(Transport& t, AllgatherPhase& s) {
  const int p = group().size();
  const int r = group().rank;
  const auto block = [&](int b) {
    return s.out + s.blocks.offset[static_cast<std::size_t>(wrap(b, p))];
  };
  const auto bytes = [&](int b) { return s.blocks.count[static_cast<std::size_t>(wrap(b, p))]; };
  if (!s.started) {
    s.started = true;
    if (s.own_send != block(r) && bytes(r) != 0) std::memmove(block(r), s.own_send, bytes(r));
  }
  while (s.step < p - 1) {
    const int k = s.step;
    if (!s.posted) {
      s.posted = true;
      recv_from(t, wrap(r - 1, p), s.first_step + k, block(r - k - 1), bytes(r - k - 1));
      send_to(t, wrap(r + 1, p), s.first_step + k, block(r - k), bytes(r - k));
    }
    if (!all_done(t)) return false;
    s.posted = false;
    ++s.step;
  }
  return true;
}

}  // namespace strait::comm
