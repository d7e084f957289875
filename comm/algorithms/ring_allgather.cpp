#include "comm/algorithms/ring_allgather.h"

#include <vector>

namespace strait::comm {

RingAllgather::RingAllgather(OpContext ctx, const void* send, void* out,
                             std::span<const std::size_t> bytes)
    : RingOp(std::move(ctx)),
      phase_{.own_send = static_cast<const std::byte*>(send),
             .out = static_cast<std::byte*>(out),
             .blocks = Blocks::packed(bytes)} {}

RingAllgather::RingAllgather(const OpContext& ctx, const void* send, void* out, std::size_t bytes)
    : RingAllgather(ctx, send, out,
                    std::vector<std::size_t>(ctx.group->world_ranks.size(), bytes)) {}

bool RingAllgather::advance(Transport& t) {
  return advance_phase(t, phase_);
}

}  // namespace strait::comm
