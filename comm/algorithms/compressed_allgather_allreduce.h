// Allreduce of f32 through an allgather of encoded inputs, for sparse codecs whose encodings cannot
// be re-encoded at every hop without losing what makes them small (top-k: the sum of two top-k
// vectors has up to 2k non-zeros). Each rank encodes its input once (with error feedback, keyed),
// the ring passes the P encodings around unchanged (P-1 steps: at step k rank r sends encoding
// r-k and receives r-k-1), and every rank decodes all P in rank order 0..P-1, adding them in fp32
// into zeros: the same bytes in the same order, so all ranks end bit-identical. Avg then scales
// by 1/P. As in Aji & Heafield 2017 and Lin et al. 2018 (Deep Gradient Compression), whose sparse
// gradients are gathered, not reduced.
// Bytes sent per rank: (P-1) * encoded_bytes(count); decodes: P per rank.
// Error feedback: residual = compensated input - decode(own encoding), as in error_feedback.h.
// Sizes, buffers and errors as compressed_ring_allreduce.h.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/compressed_allreduce_op.h"

namespace strait::comm {

class CompressedAllgatherAllreduce final : public CompressedAllreduceOp {
 public:
  // `key` empty: no error feedback. `average`: Avg instead of Sum.
  CompressedAllgatherAllreduce(OpContext ctx, CompressedBuffers b);
  bool advance(Transport& t) override;

 private:
  void start();

  bool started_ = false;
  bool posted_ = false;
  int step_ = 0;
  std::size_t blob_bytes_ = 0;
  // Every rank's encoding, P * blob_bytes_; shared with the requests, which may outlive a failed
  // op.
  std::shared_ptr<std::vector<std::byte>> blobs_;
};

}  // namespace strait::comm
