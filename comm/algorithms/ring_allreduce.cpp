#include "comm/algorithms/ring_allreduce.h"

#include <cstring>

namespace strait::comm {

RingAllreduce::RingAllreduce(std::shared_ptr<const Group> group, std::uint64_t seq,
                             std::atomic<std::uint64_t>* bytes_sent, const void* send, void* recv,
                             std::size_t count, kernels::DType dtype, kernels::ReduceOp op)
    : CollectiveOp(std::move(group), seq, bytes_sent),
      send_(send),
      out_(static_cast<std::byte*>(recv)),
      count_(count),
      dtype_(dtype),
      op_(op),
      elem_(kernels::dtype_size(dtype)) {}

std::size_t RingAllreduce::chunk_count(int chunk) const {
  const auto p = static_cast<std::size_t>(group().size());
  const auto c = static_cast<std::size_t>(chunk);
  return count_ / p + (c < count_ % p ? 1 : 0);
}

std::size_t RingAllreduce::chunk_offset(int chunk) const {
  const auto p = static_cast<std::size_t>(group().size());
  const auto c = static_cast<std::size_t>(chunk);
  return c * (count_ / p) + std::min(c, count_ % p);
}

bool RingAllreduce::advance(Transport& t) {
  const int p = group().size();
  const int r = group().rank;
  const auto reduce_op = op_ == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : op_;
  if (!started_) {
    started_ = true;
    if (send_ != out_ && count_ != 0) std::memcpy(out_, send_, count_ * elem_);
    scratch_ = std::make_shared_for_overwrite<std::byte[]>(chunk_count(0) * elem_);
  }
  const int steps = 2 * (p - 1);
  while (step_ < steps) {
    const bool reduce_scatter = step_ < p - 1;
    if (!posted_) {
      const int k = reduce_scatter ? step_ : step_ - (p - 1);
      const int send_chunk = ((reduce_scatter ? r - k : r + 1 - k) % p + p) % p;
      recv_chunk_ = ((reduce_scatter ? r - k - 1 : r - k) % p + p) % p;
      const std::size_t recv_bytes = chunk_count(recv_chunk_) * elem_;
      std::byte* dst = reduce_scatter ? scratch_.get() : out_ + chunk_offset(recv_chunk_) * elem_;
      RequestPtr rx = recv_from(t, (r - 1 + p) % p, step_, dst, recv_bytes);
      if (reduce_scatter) rx->keep_alive = scratch_;
      send_to(t, (r + 1) % p, step_, out_ + chunk_offset(send_chunk) * elem_,
              chunk_count(send_chunk) * elem_);
      posted_ = true;
    }
    if (!all_done(t)) return false;
    if (reduce_scatter) {
      kernels::reduce(dtype_, reduce_op, out_ + chunk_offset(recv_chunk_) * elem_, scratch_.get(),
                      chunk_count(recv_chunk_));
    }
    posted_ = false;
    ++step_;
  }
  if (op_ == kernels::ReduceOp::Avg && count_ != 0) {
    kernels::scale(dtype_, out_, count_, 1.0 / p);
  }
  return true;
}

}  // namespace strait::comm
