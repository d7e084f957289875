#include "comm/algorithms/direct_allreduce.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "comm/algorithms/scratch.h"
#include "comm/transport/partition.h"

namespace strait::comm {

DirectAllreduce::DirectAllreduce(OpContext ctx, const ReduceBuffers& b)
    : AllreduceOp(std::move(ctx), b) {}

DirectAllreduce::Chunk DirectAllreduce::chunk(int c) const {
  const auto p = static_cast<std::size_t>(group().size());
  const Part part_c = part(count_, p, static_cast<std::size_t>(c));
  return Chunk{part_c.offset * elem_, part_c.count * elem_};
}

void DirectAllreduce::start(Transport& t) {
  started_ = true;
  const int p = group().size();
  const int r = group().rank;
  if (p == 1) {
    copy_input();
    return;
  }
  const auto* in = static_cast<const std::byte*>(send_);
  for (int k = 1; k < p; ++k) {
    const int q = (r + k) % p;
    const Chunk c = chunk(q);
    scatter_sends_.push_back(send_to(t, q, 0, in + c.offset, c.bytes));
  }
  scratch_ = scratch_buffer(std::max<std::size_t>(chunk(0).bytes, 1));
  post_next_reduce(t);
}

void DirectAllreduce::post_next_reduce(Transport& t) {
  const int p = group().size();
  const int r = group().rank;
  const Chunk c = chunk(r);
  const auto* in = static_cast<const std::byte*>(send_);
  // The first peer's chunk is reduced from this rank's input, the later ones into the output.
  const ReduceOnArrival how{dtype_, elementwise_op(), out_ + c.offset,
                            reduced_ == 0 ? in + c.offset : out_ + c.offset};
  reducing_ = recv_from(t, (r + reduced_ + 1) % p, 0, scratch_.get(), c.bytes, how);
  if (!reducing_->keep_alive) reducing_->keep_alive = scratch_;
}

bool DirectAllreduce::advance(Transport& t) {
  if (!started_) start(t);
  const int p = group().size();
  const int r = group().rank;
  if (p == 1) {
    scale_if_avg(out_, count_);
    return true;
  }
  bool all = all_done(t);  // throws when a message failed or had the wrong size
  const Chunk mine = chunk(r);
  while (reduced_ < p - 1 && reducing_->state == TransportRequest::State::Done) {
    if (!reducing_->reduced) {
      const auto* in = static_cast<const std::byte*>(send_);
      if (reduced_ == 0 && in != out_) {
        std::memcpy(out_ + mine.offset, in + mine.offset, mine.bytes);
      }
      kernels::reduce(dtype_, elementwise_op(), out_ + mine.offset, scratch_.get(),
                      mine.bytes / elem_);
    }
    ++reduced_;
    if (reduced_ < p - 1) {
      post_next_reduce(t);
      all = false;
    }
  }
  if (reduced_ < p - 1) return false;
  if (!gathering_) {
    // In place, a peer may still read chunk q of the input, where chunk q now lands: wait for it.
    const bool sent = std::all_of(scatter_sends_.begin(), scatter_sends_.end(), [](const auto& s) {
      return s->state == TransportRequest::State::Done;
    });
    if (!sent) return false;
    gathering_ = true;
    scale_if_avg(out_ + mine.offset, mine.bytes / elem_);
    for (int k = 1; k < p; ++k) {
      const int q = (r + k) % p;
      const Chunk c = chunk(q);
      recv_from(t, q, 1, out_ + c.offset, c.bytes);
    }
    for (int k = 1; k < p; ++k) send_to(t, (r + k) % p, 1, out_ + mine.offset, mine.bytes);
    all = false;
  }
  return all || all_done(t);
}

}  // namespace strait::comm
