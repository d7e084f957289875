// Binomial-tree scatter (MPICH's MPIR_Scatter_intra_binomial, over the tree of binomial_tree.h;
// the mirror of binomial_gather.h): every rank receives its subtree's blocks (contiguous in
// relative rank order) from its parent in one message, sends each child its subtree's blocks,
// largest subtree first, and keeps its own block. ceil(log2 P) latency terms, where a linear
// scatter costs the root P-1 message latencies. Bytes: the root sends (P-1) blocks either way;
// rank v receives span(v) blocks. Scratch: the subtree's blocks on inner ranks, P blocks on a
// root other than rank 0.
#pragma once

#include <cstddef>

#include "comm/algorithms/binomial_blocks.h"

namespace strait::comm {

class BinomialScatter final : public BinomialBlocksOp {
 public:
  // The root's `send` holds size() * bytes, rank-major (ignored elsewhere); every rank's `recv`
  // gets its block of `bytes`. The root's recv may be send + root * bytes (in place).
  BinomialScatter(OpContext ctx, const void* send, void* recv, std::size_t bytes, int root);
  bool advance(Transport& t) override;

 private:
  const std::byte* subtree_ = nullptr;  // this subtree's blocks in relative order
};

}  // namespace strait::comm
