// LocalCopy's rooted collectives: reduce, gather and scatter (the protocol: local_copy.h).
#include <cstring>

#include "comm/algorithms/local_copy.h"
#include "comm/transport/partition.h"

namespace strait::comm {

void LocalCopy::copy_rooted() {
  const auto p = static_cast<std::size_t>(group().size());
  const int me = group().rank;
  const auto mine = static_cast<std::size_t>(me);
  const auto* send = static_cast<const std::byte*>(b_.send);
  auto* recv = static_cast<std::byte*>(b_.recv);
  switch (kind_) {
    case Kind::Reduce: {
      // Chunk r of every rank's input, reduced by rank r: into the root's output, or into this
      // rank's scratch, which the root reads after the "reduced" round (gather_reduced). Faster
      // than the root reducing all P inputs itself: it reads (P-1)n/P bytes twice instead of
      // (P-1)n, and the P ranks reduce at once.
      const std::size_t elem = kernels::dtype_size(b_.dtype);
      const Part c = part(b_.count, p, mine);
      std::byte* into = me == b_.root ? recv + c.offset * elem : result_.get();
      if (c.count != 0) reduce_block(c.offset * elem, into, c.count * elem);
      break;
    }
    case Kind::Gather:
      if (me != b_.root) break;
      if (send != recv + mine * block_) std::memcpy(recv + mine * block_, send, block_);
      for (std::size_t k = 1; k < p; ++k) {
        const auto q = static_cast<int>((mine + k) % p);
        read(q, published(q, 0), recv + static_cast<std::size_t>(q) * block_, block_);
      }
      break;
    case Kind::Scatter:
      if (me == b_.root) {
        if (recv != send + mine * block_) std::memcpy(recv, send + mine * block_, block_);
      } else {
        read(b_.root, published(b_.root, 0) + mine * block_, recv, block_);
      }
      break;
    default: break;
  }
}

}  // namespace strait::comm
