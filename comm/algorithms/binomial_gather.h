// Binomial-tree gather (MPICH's MPIR_Gather_intra_binomial, over the tree of binomial_tree.h):
// every rank receives the blocks of its children's subtrees (contiguous in relative rank order)
// next to its own and sends its whole subtree to its parent in one message; the root then puts
// the blocks in rank order. ceil(log2 P) latency terms, where a linear gather (every rank sends
// to the root) costs the root P-1 message latencies: binomial is the choice for small and medium
// blocks, which is what gather is used for. Bytes: the root receives (P-1) blocks either way;
// rank v sends its subtree's span(v) blocks, (P/2) log2 P blocks in all for P a power of two.
// Scratch: the subtree's blocks on inner ranks, P blocks on a root other than rank 0.
#pragma once

#include <cstddef>

#include "comm/algorithms/binomial_blocks.h"

namespace strait::comm {

class BinomialGather final : public BinomialBlocksOp {
 public:
  // Each rank's `send` holds `bytes`; the root's `recv` gets size() * bytes, rank-major (null
  // elsewhere is fine). The root's send may be recv + root * bytes (in place).
  BinomialGather(OpContext ctx, const void* send, void* recv, std::size_t bytes, int root);
  bool advance(Transport& t) override;

 private:
  std::byte* subtree_ = nullptr;  // this subtree's blocks in relative order
};

}  // namespace strait::comm
