#include "comm/algorithms/ring_reduce_scatter.h"

namespace strait::comm {

RingReduceScatter::RingReduceScatter(OpContext ctx, const void* send, void* recv,
                                     std::span<const std::size_t> counts, kernels::DType dtype,
                                     kernels::ReduceOp op)
    : RingOp(std::move(ctx)),
      phase_{.send = static_cast<const std::byte*>(send),
             .own = static_cast<std::byte*>(recv),
             .blocks = Blocks::packed(counts),
             .dtype = dtype,
             .op = op} {}

bool RingReduceScatter::advance(Transport& t) {
  return advance_phase(t, phase_);
}

}  // namespace strait::comm
