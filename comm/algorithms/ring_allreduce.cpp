#include "comm/algorithms/ring_allreduce.h"

#include <cstring>

namespace strait::comm {

RingAllreduce::RingAllreduce(std::shared_ptr<const Group> group, std::uint64_t seq,
                             std::atomic<std::uint64_t>* bytes_sent, const void* send, void* recv,
                             std::size_t count, kernels::DType dtype, kernels::ReduceOp op)
    : RingOp(std::move(group), seq, bytes_sent),
      send_(send),
      out_(static_cast<std::byte*>(recv)),
      bytes_(count * kernels::dtype_size(dtype)) {
  const int p = this->group().size();
  const auto r = static_cast<std::size_t>(this->group().rank);
  const std::size_t elem = kernels::dtype_size(dtype);
  // Reduce-scatter within the output buffer (in place), then allgather the reduced blocks.
  Blocks blocks = Blocks::even(count, p);
  std::byte* own = out_ + blocks.offset[r] * elem;
  allgather_ = {.own_send = own,
                .out = out_,
                .blocks = Blocks::packed(blocks.count, elem),
                .first_step = p - 1};
  reduce_scatter_ = {.send = out_,
                     .own = own,
                     .work = out_,
                     .blocks = std::move(blocks),
                     .dtype = dtype,
                     .op = op,
                     .first_step = 0};
}

bool RingAllreduce::advance(Transport& t) {
  if (!started_) {
    started_ = true;
    if (send_ != out_ && bytes_ != 0) std::memcpy(out_, send_, bytes_);
  }
  return advance_phase(t, reduce_scatter_) && advance_phase(t, allgather_);
}

}  // namespace strait::comm
